"""The stand-in answers TerminateInstances as EC2 does for an instance that is already shutting down
(its container still halting): with its state, not moto's error about the network interface it
deleted the first time. `up` repairing a cluster whose nodes were all just terminated sends that."""
from __future__ import annotations

from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.ec2.models import EC2Backend, ec2_backends

from xeoncluster.standin.faults import Faults
from xeoncluster.standin.moto_hooks import Hooks, MotoState


class HaltingFleet:
    """The fleet's part in a termination: the instance stays shutting-down while its container halts."""

    def __init__(self) -> None:
        self.terminating_calls: list[list[str]] = []
        self.instances: dict[str, Any] = {}

    def launch(self, launch: Any) -> None:
        """No container to boot here."""

    def terminating(self, instance_ids: list[str]) -> None:
        self.terminating_calls.append(instance_ids)
        for instance_id in instance_ids:
            MotoState().set_state(self.instances[instance_id], "shutting-down")


def test_a_second_terminate_of_a_shutting_down_instance_answers_with_its_state(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("run_instances", "terminate_instances"):
        monkeypatch.setattr(EC2Backend, name, getattr(EC2Backend, name))  # restored after the test
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        fleet = HaltingFleet()
        hooks = Hooks(fleet, Faults)  # type: ignore[arg-type]
        hooks._patch_instances()
        ec2 = boto3.client("ec2", region_name="us-east-1")
        image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
        interface = {"DeviceIndex": 0, "SubnetId": subnet, "DeleteOnTermination": True}  # as `up` launches
        instance_id = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1,
                                        NetworkInterfaces=[interface])["Instances"][0]["InstanceId"]
        fleet.instances[instance_id] = ec2_backends["123456789012"]["us-east-1"].get_instance(instance_id)
        first = ec2.terminate_instances(InstanceIds=[instance_id])["TerminatingInstances"][0]
        assert first["PreviousState"]["Name"] == "running"
        again = ec2.terminate_instances(InstanceIds=[instance_id])["TerminatingInstances"][0]
        assert again["CurrentState"]["Name"] == "shutting-down"
        assert fleet.terminating_calls == [[instance_id]]
