"""The provider interface is a small core; what only some providers can do is a Protocol each implements
or not, and callers ask with isinstance()."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers import abilities
from xeoncluster.providers.aws.provider import AwsProvider
from xeoncluster.providers.base import BaseImage, LaunchRequest, Placement, Provider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.local.provider import LocalProvider
from xeoncluster.providers.node_kinds import Node, Role

PROTOCOLS = [abilities.BakesInBackground, abilities.ReadsHostKeys, abilities.RemovesNodes, abilities.HasAccount,
             abilities.HasOwners, abilities.AgentOnMaster, abilities.SizesDisks, abilities.LaunchesTogether,
             abilities.PurgesImages, abilities.PricesNodes, abilities.PlansResources, abilities.PlansMachines,
             abilities.HasBaseImages, abilities.ExplainsLoss]
LOCAL_HAS = {abilities.ReadsHostKeys, abilities.RemovesNodes, abilities.PlansResources}
NODE = Node("node1", "xc-t1-node1", "10.0.0.3", "10.0.0.3", Role.WORKER, "local")


def public_methods(cls: type) -> list[str]:
    return [name for name, _ in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")]


def test_the_core_has_at_most_twelve_public_methods() -> None:
    assert len(public_methods(Provider)) <= 12, public_methods(Provider)


def test_the_core_holds_no_ability_flag() -> None:
    flags = {"bakes_in_background", "agent_on_master", "bake_root_gib"}
    assert not flags & set(vars(Provider))


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.__name__)
def test_each_provider_implements_its_abilities(protocol: type, tmp_path: Path) -> None:
    aws = AwsProvider("us-east-1")
    local = LocalProvider(tmp_path)
    assert isinstance(aws, protocol)
    assert isinstance(local, protocol) == (protocol in LOCAL_HAS)


def test_without_an_ability_the_caller_gets_what_it_meant(tmp_path: Path) -> None:
    local, config = LocalProvider(tmp_path), ClusterConfig(name="t1", provider="local")
    assert abilities.base_image(local, config) == BaseImage("local-host")
    assert abilities.placement(local, config) == Placement(None, "-", "local", "local")
    assert abilities.loss_reason(local, config, NODE) == "gone"
    assert abilities.root_gib(local, config) is None and abilities.bake_root_gib(local) is None
    with pytest.raises(ConfigError, match="has no account"):
        abilities.account_id(local)
    with pytest.raises(ProviderError, match="cannot bake in the background"):
        abilities.start_bake(local, config, NODE, "key")
    with pytest.raises(ConfigError, match="no machine types"):
        abilities.machine_topology(local, "c7i.2xlarge")


def test_a_launch_request_names_the_master() -> None:
    config = ClusterConfig(name="t1", provider="local")
    assert LaunchRequest(config, 1, None, Role.MASTER, 0).for_master
    assert not LaunchRequest(config, 2, None, Role.WORKER, 1).for_master


def test_no_provider_function_takes_more_than_eight_parameters() -> None:
    import xeoncluster.providers.abilities as module

    for owner in (Provider, AwsProvider, LocalProvider, module):
        for name, function in inspect.getmembers(owner, inspect.isfunction):
            assert len(inspect.signature(function).parameters) <= 8, f"{owner.__name__}.{name}"


def test_every_spec_has_its_plugin_and_the_reverse() -> None:
    from xeoncluster.providers.plugins import plugins
    from xeoncluster.providers.registry import specs

    assert {name: plugin.spec for name, plugin in plugins().items()} == specs()


def test_each_plugin_builds_its_provider(tmp_path: Path) -> None:
    from xeoncluster.providers.factory import make_provider

    aws = ClusterConfig.model_validate({"name": "t1", "aws": {"region": "eu-west-1"}})
    local = ClusterConfig.model_validate({"name": "t1", "provider": "local", "local": {"root": str(tmp_path)}})
    built = make_provider(aws, lambda _line: None)
    assert isinstance(built, AwsProvider) and built.region == "eu-west-1"
    assert isinstance(make_provider(local, lambda _line: None), LocalProvider)


def test_the_config_names_no_provider_and_takes_each_section_from_its_spec() -> None:
    from xeoncluster.providers.registry import specs

    package = Path(__file__).resolve().parents[2] / "xeoncluster" / "providers"
    for neutral in ("config.py", "factory.py", "plugin.py"):
        assert not [line for line in (package / neutral).read_text().splitlines()
                    if "Settings" in line and ("Aws" in line or "Local" in line)], neutral
    sections = {name for name, field in ClusterConfig.model_fields.items()
                if field.annotation in {spec.settings for spec in specs().values()}}
    assert sections == {name for name, spec in specs().items() if spec.settings is not None}
