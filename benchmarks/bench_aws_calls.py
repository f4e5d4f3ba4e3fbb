"""EC2 API calls and wall time of a full AWS `up` + `down` under moto, by cluster size.

    python benchmarks/bench_aws_calls.py [--sizes 4,16,64,256]

Runs prepare -> launch master (1) -> bake -> launch workers (N-1) -> terminate with in-process
moto (no network), counting EC2 calls through the provider's own before-call hook. Prints JSON,
then a table. Claim checked at the end: the number of mutating EC2 calls does not grow with N.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PHASES = ("prepare", "launch_master", "bake", "launch_workers", "terminate")
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGnQnGWTWnV6y0vkNEzYqo9bZ3y0D4xGxKDc9uK3mVb0 bench"
UBUNTU_AMI = "ami-785db401"  # moto's Canonical Ubuntu AMI stands in for 24.04


def isolate_environment() -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
                 "AWS_ENDPOINT_URL_EC2"):
        os.environ.pop(name, None)
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                      AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull)


def fill_moto_gaps() -> None:
    """moto 5.2.1 lacks the Ubuntu SSM parameter and snapshot tags in create_image."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.ec2.models.amis import AmiBackend
    from moto.ssm.models import Parameter, ssm_backends

    from xeoncluster.providers.aws.images import BASE_IMAGE_PARAMETER

    ssm_backends[DEFAULT_ACCOUNT_ID]["us-east-1"]._parameters[BASE_IMAGE_PARAMETER].append(Parameter(
        account_id=DEFAULT_ACCOUNT_ID, name=BASE_IMAGE_PARAMETER, value=UBUNTU_AMI, parameter_type="String",
        description=None, allowed_pattern=None, keyid=None, last_modified_date=1.7e9, version=1,
        data_type="aws:ec2:image"))
    real = AmiBackend.create_image
    if getattr(real, "_bench_patched", False):
        return

    def create_image(self: Any, instance_id: str, name: str, description: str, tag_specifications: list[Any]) -> Any:
        return real(self, instance_id, name, description,
                    [s for s in tag_specifications if s["ResourceType"] != "snapshot"])

    create_image._bench_patched = True  # type: ignore[attr-defined]
    AmiBackend.create_image = create_image  # type: ignore[method-assign]


def no_placement_groups(client: Any) -> None:
    """moto raises NotImplementedError for placement groups; this benchmark uses none."""
    from botocore.awsrequest import AWSResponse

    def answer(**_: Any) -> Any:
        return AWSResponse("https://ec2.fake", 200, {}, None), {"PlacementGroups": []}

    client.meta.events.register("before-call.ec2.DescribePlacementGroups", answer)


def run_one(nodes: int) -> dict[str, Any]:
    from moto import mock_aws

    from xeoncluster.providers.aws.provider import AwsProvider
    from xeoncluster.providers.config import ClusterConfig

    cluster = ClusterConfig.model_validate({"name": "bench", "provider": "aws", "region": "us-east-1",
                                            "nodes": nodes, "ssh": {"cidr": "auto"}})
    with mock_aws():
        fill_moto_gaps()
        provider = AwsProvider("us-east-1", caller_ip=lambda: "203.0.113.7")
        provider.instance_wait = provider.image_wait = {"Delay": 0, "MaxAttempts": 3}
        no_placement_groups(provider.ec2)
        phases: dict[str, dict[str, Any]] = {}
        master: list[Any] = []
        image: list[Any] = []
        steps = {
            "prepare": lambda: provider.prepare(cluster, PUBLIC_KEY),
            "launch_master": lambda: master.extend(provider.launch(cluster, 1, None, "master", 0)),
            "bake": lambda: image.append(provider.bake(cluster, master[0], "c" * 64)),
            "launch_workers": lambda: provider.launch(cluster, nodes - 1, image[0], "worker", 1),
            "terminate": lambda: provider.terminate(cluster),
        }
        start = time.perf_counter()
        for phase in PHASES:
            before = len(provider.calls)
            t0 = time.perf_counter()
            steps[phase]()
            calls = [c for c in provider.calls[before:] if c.service == "ec2"]
            phases[phase] = {"seconds": round(time.perf_counter() - t0, 3), "ec2_calls": len(calls),
                             "mutating": sorted(c.operation for c in calls if c.mutating)}
        wall = time.perf_counter() - start
    ec2_calls = [c for c in provider.calls if c.service == "ec2"]
    return {"nodes": nodes, "seconds": round(wall, 3), "ec2_calls": len(ec2_calls),
            "mutating_calls": sum(c.mutating for c in ec2_calls), "phases": phases}


def table(results: list[dict[str, Any]]) -> str:
    head = f"{'nodes':>6} {'ec2 calls':>10} {'mutating':>9} {'seconds':>8}  mutating per phase"
    rows = [head, "-" * len(head)]
    for r in results:
        per_phase = " ".join(f"{p}={len(r['phases'][p]['mutating'])}" for p in PHASES)
        rows.append(f"{r['nodes']:>6} {r['ec2_calls']:>10} {r['mutating_calls']:>9} {r['seconds']:>8.2f}  {per_phase}")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,16,64,256")
    args = parser.parse_args()
    isolate_environment()
    results = [run_one(int(n)) for n in args.sizes.split(",")]
    mutating = {r["mutating_calls"] for r in results}
    same_ops = len({json.dumps([r["phases"][p]["mutating"] for p in PHASES]) for r in results}) == 1
    constant = len(mutating) == 1 and same_ops
    print(json.dumps({"results": results, "mutating_calls_constant_in_n": constant}, indent=2))
    print()
    print(table(results))
    print()
    verdict = "holds" if constant else "FAILS"
    print(f"claim: mutating EC2 calls do not grow with N -> {verdict} "
          f"(mutating calls per run: {', '.join(str(r['mutating_calls']) for r in results)})")
    return 0 if constant else 1


if __name__ == "__main__":
    sys.exit(main())
