"""Bad config and CLI input: one line naming the key, the value and what is allowed; exit 2; nothing created."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from xeoncluster.cli import main
from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.config import ClusterConfig, load_config
from xeoncluster.providers.local.net import NETNS_PREFIX


def invoke(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["xeoncluster", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    captured = capsys.readouterr()
    return int(exit_info.value.code or 0), captured.err


def namespaces() -> list[str]:
    """The local provider's network namespaces (the stand-in's own, which its tests start and stop
    meanwhile on the other worker, is not one)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(NETNS_PREFIX)]


BAD_FILES: list[tuple[str, str, list[str]]] = [
    ("nodez: 3", "unknown key 'nodez'", ["did you mean 'nodes'"]),
    ("ssh:\n  cidrr: auto", "unknown key 'ssh.cidrr'", ["did you mean 'ssh.cidr'"]),
    ("local:\n  subnett: 10.9.0.0/24", "unknown key 'local.subnett'", ["local.subnet"]),
    ("nodes: 0", "nodes: must be between 1 and 256", ["got 0"]),
    ("nodes: 300", "nodes: must be between 1 and 256", ["got 300"]),
    ("nodes: many", "nodes:", ["'many'", "integer"]),
    ("provider: gcp", "provider: must be one of", ["'aws'", "'local'", "'gcp'"]),
    ("market: cheap", "market: must be one of", ["'spot'", "'on-demand'", "'cheap'"]),
    ("master_market: sometimes", "master_market: must be one of", ["'sometimes'"]),
    ("name: Bad_Name", "name: must be lowercase letters", ["'Bad_Name'"]),
    ("name: " + "a" * 30, "name: must be lowercase letters", ["at most 24"]),
    ("region: mars-north-1x", "region: must be an AWS region", ["'mars-north-1x'"]),
    ("instance_types: []", "instance_types: must list at least one", ["got []"]),
    ("instance_types: [c7i]", "instance_types: 'c7i' is not an instance type", ["c7i.2xlarge"]),
    ("instance_types: [c7i.large, c7i.large]", "instance_types: lists an instance type twice", []),
    ("ssh:\n  cidr: 1.2.3.4/33", "ssh.cidr: must be 'auto' or a network", ["'1.2.3.4/33'"]),
    ("ssh:\n  cidr: 10.0.0.1/24", "ssh.cidr: must be 'auto' or a network", ["'10.0.0.1/24'"]),
    ("ssh:\n  timeout: 1", "ssh.timeout: must be between 5 and 3600", ["got 1"]),
    ("ssh:\n  address: internal", "ssh.address: must be one of", ["'public'", "'private'"]),
    ("image: ubuntu", "image: must be 'auto', 'none', an AMI id", ["'ubuntu'"]),
    ("stack: conda", "stack: must be one of", ["'stock'", "'intel'", "'conda'"]),
    ("root_volume_gib: 4", "root_volume_gib: must be between 8 and 16384", ["got 4"]),
    ("local:\n  subnet: 8.8.8.0/24", "local.subnet: must be a private IPv4 network", ["'8.8.8.0/24'"]),
    ("local:\n  subnet: 10.0.0.0/8", "local.subnet: must be a private IPv4 network between /16 and /28", []),
    ("local:\n  root: relative/dir", "local.root: must be an absolute path", ["relative/dir"]),
    ("local:\n  cpus_per_node: 0", "local.cpus_per_node: must be between 1 and 4096", ["got 0"]),
    ("vpc_id: vpc-xyz", "vpc_id: must match", ["'vpc-xyz'"]),
    ("zones: us-east-1a", "zones:", ["valid list", "'us-east-1a'"]),
    ("placement_group: perhaps", "placement_group:", ["boolean", "'perhaps'"]),
    ("- nodes: 2", "the top level must be a mapping", ["list"]),
    ("nodes: [1,\n", "not valid YAML", ["line"]),
    ("ssh: open", "ssh:", ["'open'"]),
]


@pytest.mark.machine_wide
@pytest.mark.parametrize("yaml_text,message,extras", BAD_FILES, ids=[b[0][:30] for b in BAD_FILES])
def test_bad_config_file(yaml_text: str, message: str, extras: list[str], xc_home: Path, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml_text + "\n")
    before = namespaces()
    code, err = invoke(["up", "--config", str(config)], capsys, monkeypatch)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert message in lines[0]
    for extra in extras:
        assert extra in lines[0]
    assert "Traceback" not in err
    assert list(xc_home.iterdir()) == []
    assert namespaces() == before


BAD_FLAGS: list[tuple[list[str], str]] = [
    (["--nodes", "0"], "nodes: must be between 1 and 256"),
    (["--nodes", "257"], "nodes: must be between 1 and 256"),
    (["--nodes", "two"], "'two' is not a valid integer"),
    (["--provider", "gcp"], "'gcp' is not one of 'aws', 'local'"),
    (["--instance-type", "huge"], "--instance-type: 'huge' is not an instance type"),
    (["--image", "my-image"], "image: must be 'auto', 'none'"),
    (["--name", "UPPER"], "name: must be lowercase letters"),
    (["--region", "nowhere"], "region: must be an AWS region"),
    (["--config", "/nonexistent/cluster.yaml"], "cannot read config /nonexistent/cluster.yaml"),
    (["--bogus-flag"], "No such option '--bogus-flag'"),
]


@pytest.mark.parametrize("flags,message", BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_bad_flags(flags: list[str], message: str, xc_home: Path, capsys: pytest.CaptureFixture[str],
                   monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = invoke(["up", "--provider", "local", *flags], capsys, monkeypatch)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert list(xc_home.iterdir()) == []


def test_cli_overrides_file(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text("name: fromfile\nnodes: 3\nssh:\n  timeout: 30\n")
    cfg = load_config(config, {"nodes": 5, "ssh.timeout": 60})
    assert (cfg.name, cfg.nodes, cfg.ssh.timeout) == ("fromfile", 5, 60)


def test_defaults_per_provider() -> None:
    aws = ClusterConfig()
    local = ClusterConfig(provider="local")
    assert (aws.aws.region, aws.ssh.user, aws.aws.market) == ("us-east-1", "ubuntu", "spot")
    assert (local.aws.region, local.ssh.user) == (None, "root")


def test_ec2_keys_of_a_config_before_0_2_load_into_the_aws_section(tmp_path: Path) -> None:
    old = tmp_path / "cluster.yaml"
    old.write_text("name: old\nmarket: on-demand\ninstance_types: [m7i.xlarge]\nroot_volume_gib: 200\n"
                   "aws:\n  zones: [us-east-1a]\n")
    config = load_config(old)
    assert (config.aws.market, config.aws.instance_types, config.aws.root_volume_gib, config.aws.zones) == \
        ("on-demand", ["m7i.xlarge"], 200, ["us-east-1a"])
    assert config.moved_notes == [f"{old}: '{key}' is now 'aws.{key}' (the old place still works)"
                                  for key in ("instance_types", "market", "root_volume_gib")]
    assert load_config(old, {"market": "spot"}).aws.market == "spot"  # --market still wins over the file
    assert "market" not in config.model_dump() and config.model_dump()["aws"]["market"] == "on-demand"


def test_shipped_cluster_yaml_is_valid_and_documented() -> None:
    path = Path(__file__).resolve().parents[2] / "cluster.yaml"
    cfg = load_config(path)
    assert cfg == ClusterConfig()
    text = path.read_text()
    for key in ClusterConfig.model_fields:
        line = next(ln for ln in text.splitlines() if ln.startswith((f"{key}:", f"  {key}:")))
        assert "#" in line or key in ("ssh", "local"), f"{key} is not commented in cluster.yaml"


def test_config_error_is_exit_2() -> None:
    assert ConfigError("x").exit_code == 2
