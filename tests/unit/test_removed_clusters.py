"""A cluster this machine removed is remembered: a second `down`, even where ./cluster.yaml names
another provider, says so and exits 0 instead of asking that provider (e.g. for AWS credentials)."""
from __future__ import annotations

import time
from pathlib import Path

from tests.conftest import run_cli
from xeoncluster.cluster.removals import Removal, record_removal

NO_AWS = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "nobody-has-this-profile",
          "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}


def test_a_second_down_says_the_cluster_was_already_removed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    record_removal(Removal(cluster="gone", provider="local", at=time.time() - 60, by="down"), home)
    (tmp_path / "cluster.yaml").write_text("provider: aws\naws:\n  region: us-east-1\n")
    result = run_cli(["down", "--name", "gone"], home, cwd=tmp_path, env_extra=NO_AWS)
    assert result.code == 0, result.err
    assert "nothing to remove: cluster 'gone' (local) was removed by `down` at " in result.out
    assert "credentials" not in result.err.lower()


def test_down_with_provider_given_searches_anyway(tmp_path: Path) -> None:
    home = tmp_path / "home"
    record_removal(Removal(cluster="gone", provider="local", at=time.time(), by="down"), home)
    result = run_cli(["down", "--name", "gone", "--provider", "aws", "--region", "us-east-1"], home, cwd=tmp_path,
                     env_extra=NO_AWS)
    # It went looking on AWS, which has nothing for it here: the profile the environment names is unknown.
    assert result.code == 2 and "AWS profile 'nobody-has-this-profile' not found" in result.err, result.err
