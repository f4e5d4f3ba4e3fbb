"""The IAM policy in docs/aws.md lists exactly the actions the provider calls."""
from __future__ import annotations

import json
import re
from pathlib import Path

from aws_helpers import PUBLIC_KEY, cluster_config, write_config

from provisioner.providers import aws_policy

REPO = Path(__file__).resolve().parents[2]


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def provider_source() -> str:
    return "\n".join(p.read_text() for p in (REPO / "provisioner" / "providers").glob("aws*.py")
                     if p.name != "aws_policy.py")


def test_every_action_in_the_policy_is_called_by_the_provider():
    source = provider_source()
    for action in aws_policy.actions():
        if action in aws_policy.TAG_ON_CREATE_ONLY:
            continue
        service, name = action.split(":", 1)
        method = aws_policy.S3_CALLED_AS.get(name, snake(name)) if service == "s3" else snake(name)
        assert re.search(rf"[.\"]{method}[\"(]", source), f"{action}: {method} is not called by the provider"
    assert len(set(aws_policy.actions())) == len(aws_policy.actions())


def test_every_call_of_a_full_lifecycle_is_in_the_policy(xc, make_provider, aws):
    write_config("placement_group: true\nmaster_market: on-demand\n")
    assert xc("plan", "--name", "t1", "--nodes", "3").code == 0
    assert xc("up", "--name", "t1", "--nodes", "3").code == 0
    assert xc("status", "--name", "t1").code == 0
    assert xc("images").code == 0
    # Paths the CLI reaches only when a cluster outlived its state: a stale SSH rule and a new local key.
    moved = make_provider(caller_ip=lambda: "198.51.100.9")
    moved.prepare(cluster_config(name="t1", placement_group=True), PUBLIC_KEY)
    # What a run does with its storage (train, the agent, logs), and a bucket the user names.
    location = moved.storage_location(cluster_config(name="t1"), "auto", Path("/unused"), create=True)
    stored = moved.open_storage(location)
    stored.put_text("t1/runs/r/run.json", "{}")
    assert stored.get_text("t1/runs/r/run.json") == "{}" and stored.objects("t1")
    stored.delete(["t1/runs/r/run.json"])
    moved.storage_location(cluster_config(name="t1"), f"s3://{location.bucket}/mine", Path("/unused"), create=False)
    assert xc("down", "--name", "t1", "--purge-images").code == 0
    assert xc("down", "--name", "t1").code == 0

    # Every boto3 call in this test came from a provider (the recorder also sees the placement-group
    # calls it answers itself, which never reach the provider's own before-call hook).
    called = {aws_policy.iam_action(service, operation) for service, operation, _ in aws.calls}
    assert called <= set(aws_policy.actions()), called - set(aws_policy.actions())
    # Everything but tag-on-create and the calls only an unusual state needs was exercised here.
    rarely = {"ec2:CancelSpotInstanceRequests"}  # moto's spot instances carry no open request after terminate
    assert set(aws_policy.actions()) - called - aws_policy.TAG_ON_CREATE_ONLY - rarely == set()


def test_the_readme_shows_this_policy():
    aws_doc = (REPO / "docs" / "aws.md").read_text()
    section = aws_doc.split("<!-- aws:start -->", 1)[1].split("<!-- aws:end -->", 1)[0]
    block = re.search(r"```json\n(.*?)\n```", section, re.S)
    assert block, "no ```json block between the aws markers in docs/aws.md"
    assert json.loads(block.group(1)) == aws_policy.policy_document()
