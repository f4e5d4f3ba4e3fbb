"""The AWS EC2 provider: composes the stateless steps of this package's modules. Every resource
carries xeoncluster:cluster=<name>; teardown finds them by that tag alone.
Mutating EC2 calls per operation do not grow with the node count: one run_instances per
launch attempt, and node names come from tags plus AmiLaunchIndex rather than per-node tags.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from xeoncluster.core.errors import ConfigError, ProviderError
from xeoncluster.providers import abilities
from xeoncluster.providers.aws import images as aws_images
from xeoncluster.providers.aws import instances as aws_instances
from xeoncluster.providers.aws import network as aws_network
from xeoncluster.providers.aws import owner as aws_owner
from xeoncluster.providers.aws import plan as aws_plan
from xeoncluster.providers.aws import prepare as aws_prepare
from xeoncluster.providers.aws import role as aws_role
from xeoncluster.providers.aws import storage as aws_storage
from xeoncluster.providers.aws import teardown as aws_teardown
from xeoncluster.providers.aws import volumes as aws_volumes
from xeoncluster.providers.aws.checkip import checkip_caller_ip
from xeoncluster.providers.aws.clients import OPTIONAL_RETRIES, ApiCall, AwsClients, translated
from xeoncluster.providers.aws.console import ConsoleWait, found_text, poll_host_keys
from xeoncluster.providers.aws.endpoints import endpoint_note, services_through_endpoints
from xeoncluster.providers.aws.image_calls import ImageCalls
from xeoncluster.providers.aws.instances import (
    launch_with_fallback,
    near_zones,
    plan_attempts,
)
from xeoncluster.providers.aws.preflight import resolve_ssh_cidr, run_preflight
from xeoncluster.providers.aws.pricing import INTER_ZONE_USD_PER_GB, node_prices, quote
from xeoncluster.providers.aws.spec import AWS, AwsSettings
from xeoncluster.providers.base import (
    BaseImage,
    LaunchRequest,
    Network,
    Node,
    Placement,
    PlannedResource,
    Prepared,
    PriceQuote,
    Provider,
    Removed,
)
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.storage.base import Storage, StorageLocation
from xeoncluster.topology import CpuTopology


class AwsProvider(ImageCalls, Provider, abilities.BakesInBackground, abilities.ReadsHostKeys, abilities.RemovesNodes,
                  abilities.HasAccount, abilities.HasOwners, abilities.AgentOnMaster, abilities.SizesDisks,
                  abilities.LaunchesTogether, abilities.PurgesImages, abilities.PricesNodes, abilities.PlansResources,
                  abilities.PlansMachines, abilities.HasBaseImages, abilities.ExplainsLoss, abilities.BillsZoneTraffic):
    name = "aws"
    notice_source = AWS.notices
    bake_root_gib = aws_images.BAKE_ROOT_GIB

    def __init__(self, region: str, profile: str | None = None, events: Callable[[str], None] = lambda m: None,
                 caller_ip: Callable[[], str] | None = None) -> None:
        self.region = region
        self.profile = profile
        self.events = events
        self.clients = AwsClients(region, profile)
        self.identity = aws_owner.CallerIdentity(lambda: self.clients.client("sts").get_caller_identity())
        self._caller_ip = caller_ip or checkip_caller_ip
        self._resolved_cidrs: dict[str, str] = {}
        # Waiter pacing and the sleep used between retries; tests shorten them.
        self.instance_wait = {"Delay": 5, "MaxAttempts": 120}
        self.image_wait = {"Delay": 15, "MaxAttempts": 160}
        # How long the nodes of one launch are polled for host keys in their console output.
        self.host_key_wait = {"Delay": 5, "MaxAttempts": 24}
        self._console_wait: ConsoleWait | None = None
        self.sleep: Callable[[float], None] = time.sleep
        self._said: set[str] = set()  # the warnings given: a command lists its nodes more than once

    def _warn_once(self, line: str) -> None:
        if line not in self._said:
            self._said.add(line)
            self.events(line)

    @property
    def ec2(self) -> Any:
        return self.clients.ec2

    @property
    def calls(self) -> list[ApiCall]:
        return self.clients.calls

    def ssh_cidr(self, cluster: ClusterConfig) -> str:
        cidr = cluster.ssh.cidr
        if cidr not in self._resolved_cidrs:
            self._resolved_cidrs[cidr] = resolve_ssh_cidr(cidr, self._caller_ip)
            if cidr == "auto":
                self.events(f"ssh.cidr auto: your public address is {self._resolved_cidrs[cidr]}")
        return self._resolved_cidrs[cidr]

    # -- preflight -------------------------------------------------------------------------
    def preflight(self, cluster: ClusterConfig, *, for_plan: bool = False) -> list[str]:
        return run_preflight(self.clients, cluster, lambda: self.ssh_cidr(cluster), require_base_image=not for_plan)

    # -- prepare: a pipeline of small named steps (prepare.py) -----------------------------
    def prepare(self, cluster: ClusterConfig, public_key: str) -> Prepared:
        with translated(f"preparing cluster {cluster.name} in {self.region}"):
            return aws_prepare.prepare(self.ec2, cluster, public_key, self.ssh_cidr(cluster), self.events,
                                       self.owner())

    def prepare_agent_access(self, cluster: ClusterConfig, network: Network | None, image_key: str | None,
                             storage: StorageLocation | None) -> list[str]:
        """The cluster's role and instance profile (every node's), scoped to the cluster and its storage (role.py)."""
        with translated(f"preparing the cluster's role for {cluster.name}"):
            network = network or aws_prepare.find_network(self.ec2, cluster)
            prefix = (storage.container, storage.cluster_key(cluster.name)) if storage and storage.container else None
            through = services_through_endpoints(self.ec2, self.region, str(network.vpc_id),
                                                 list(network.subnets.values()))
            scope = aws_role.RoleScope(
                cluster.name, self.region, self.account_id(), str(network.security_group_id),
                tuple(network.subnets.values()), self._base_image_id(cluster), image_key, prefix,
                tuple(cluster.section(AwsSettings).instance_types), self.owner(), through)
            result = aws_role.ensure_master_role(self.clients.client("iam"), scope)
        self.events(f"role {result.name} (every node's), for the agent: {'created' if result.created else 'updated'}")
        self._warn_once(endpoint_note(through))
        return [result.name] if result.created else []

    def _node_profile(self, cluster: ClusterConfig) -> str | None:
        """The profile every node carries, if `up` made one (a provider used on its own may not have). The run
        agent runs on a node launched with it and may not read IAM: it takes the name, which is the role's."""
        name = aws_role.role_name(cluster.name, self.region)
        if self.identity.acting_for is not None:
            return name
        return name if aws_role.profile_exists(self.clients.client("iam"), name) else None

    def storage_location(self, cluster: ClusterConfig, url: str, default_folder: Path,
                         create: bool, setup: bool = False) -> StorageLocation:
        """S3 only (the agent on the master could reach no folder here): aws_storage.resolve says which."""
        with translated(f"preparing the run storage {url}"):
            return aws_storage.resolve(self.clients.client("s3"), url, self.account_id(), self.region,
                                       aws_storage.Access(create, setup, self.owner()), self.events)

    def open_storage(self, location: StorageLocation) -> Storage:
        """A location recorded before it carried its owner is the caller's account's (so is a master's role)."""
        owned = replace(location, owner=location.owner or self.account_id())
        return aws_storage.S3Storage(self.clients.client("s3"), owned)

    def account_id(self) -> str:
        return self.identity.account()

    def owner(self) -> str:
        """The caller's UserId, every resource's owner tag (owner.py); the run agent's: its user's."""
        return self.identity.owner()

    def act_for(self, owner: str | None) -> None:
        """As the run agent (holding the role: its launches name the profile unasked) or `down --owner`."""
        self.identity.acting_for = owner

    # -- images ----------------------------------------------------------------------------
    def base_image(self, cluster: ClusterConfig) -> BaseImage:
        """What the nodes start from: the given AMI, else Ubuntu 24.04 from SSM."""
        if cluster.image.startswith("ami-"):
            return BaseImage(cluster.image)
        try:
            with translated("reading the Ubuntu 24.04 image id from SSM"):
                return BaseImage(aws_images.base_image_id(self.clients.client("ssm")))
        except ConfigError:
            return BaseImage(None, "SSM parameter missing")

    def _base_image_id(self, cluster: ClusterConfig) -> str:
        if cluster.image.startswith("ami-"):
            return cluster.image
        with translated("reading the Ubuntu 24.04 image id from SSM"):
            return aws_images.base_image_id(self.clients.client("ssm"))

    # -- instances -------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> list[Node]:
        cluster, count, role, near = request.cluster, request.count, request.role, request.near
        if count <= 0:
            return []
        self._console_wait = None  # new nodes: a new wait for their host keys
        doing = f"launching {count} {role} node(s) for {cluster.name}"
        with translated(doing):
            network = request.network or aws_prepare.find_network(self.ec2, cluster)
            spec = self._launch_spec(request, network)
        aws = cluster.section(AwsSettings)
        market = aws.effective_master_market if request.for_master else aws.worker_market
        kept = aws_instances.kept_zone(near, aws, request.replacement)
        zones_by_type = near_zones(network.zones_by_type, near, kept is not None)
        attempts = plan_attempts(aws, zones_by_type, market, home=near.zone if near else None)
        launched = launch_with_fallback(self.ec2, spec, attempts, self.instance_wait, self.events,
                                        run_client=self.clients.ec2_no_retries, sleep=self.sleep, kept=kept)
        if near is not None and near.zone and launched.attempt.zone != near.zone:
            self.events(f"warning: {role}s run in {launched.attempt.zone}, not in {near.name}'s zone {near.zone} "
                        "(no capacity there): DDP traffic crosses zones, with more latency and a per-GB charge")
        ids = list(launched.instance_ids)
        try:
            with translated(doing):
                raws = aws_instances.describe_instances(self.ec2, ids=ids)
        except BaseException:
            aws_instances.terminate_now(self.ec2, ids)
            raise
        return aws_instances.to_nodes(raws, cluster.ssh.address, self._warn_once)

    def _launch_spec(self, request: LaunchRequest, network: Network) -> aws_instances.LaunchSpec:
        cluster, role, aws = request.cluster, request.role, request.cluster.section(AwsSettings)
        image_id = request.image.id if request.image is not None else request.base or self._base_image_id(cluster)
        raw_image = aws_images.describe_image(self.ec2, image_id)
        if raw_image is None:
            raise ProviderError(f"image {image_id} not found in {self.region}")
        return aws_instances.LaunchSpec(
            cluster=cluster.name, role=role, count=request.count, first_index=request.first_index, image_id=image_id,
            root_device=raw_image.get("RootDeviceName", "/dev/sda1"),
            root_gib=aws.root_volume_gib if request.root_gib is None else request.root_gib,
            key_name=aws_network.resource_name(cluster.name), security_group_id=str(network.security_group_id),
            subnets=dict(network.subnets), owner=self.owner(),
            placement_group=aws_network.resource_name(cluster.name) if aws.placement_group else None,
            instance_profile=self._node_profile(cluster),
            # Whatever address SSH uses, nodes need a way out to apt, PyPI and the Hugging Face hub;
            # in a default VPC that is a public IP (preflight checks the subnets' default route).
            public_ip=True)

    def remove_node(self, cluster: ClusterConfig, node: Node) -> Removed:
        with translated(f"terminating {node.name} ({node.id})"):
            gone = aws_teardown.terminate_if_present(self.ec2, node.id, self.instance_wait)
        return Removed({"instances": [node.id] if gone else []})

    def loss_reason(self, cluster: ClusterConfig, node: Node) -> str:
        """EC2's own account of the instance: e.g. a spot interruption (Server.SpotInstanceTermination)."""
        with translated(f"describing {node.name} ({node.id})"):
            return aws_instances.loss_reason(self.ec2, node.id)

    def root_gib(self, cluster: ClusterConfig) -> int | None:
        return cluster.section(AwsSettings).root_volume_gib

    def inter_zone_usd_per_gb(self) -> float:
        return INTER_ZONE_USD_PER_GB

    def launches_together(self, cluster: ClusterConfig) -> bool:
        return not cluster.section(AwsSettings).placement_group  # the group's zone is the master's: it goes first

    def grow_root(self, cluster: ClusterConfig, node: Node) -> bool:
        gib = cluster.section(AwsSettings).root_volume_gib
        with translated(f"growing the root volume of {node.name} ({node.id}) to {gib} GiB"):
            size = aws_volumes.grow_root(self.ec2, node.id, gib, self.instance_wait, self.sleep)
        self.events(f"root volume of {node.name} grown from {size} to {gib} GiB" if size < gib
                    else f"root volume of {node.name} is already {size} GiB")
        return True

    def nodes(self, cluster: ClusterConfig, priced: bool = True) -> list[Node]:
        """The cluster's live instances, from tags, each with its estimated $/hour."""
        with translated(f"listing the nodes of {cluster.name}"):
            raws = aws_instances.describe_instances(self.ec2, cluster=cluster.name, owner=self.owner())
        nodes = aws_instances.to_nodes(raws, cluster.ssh.address, self._warn_once)
        return node_prices(self.ec2, self._pricing(), nodes, self.region) if nodes and priced else nodes

    def host_keys(self, node: Node) -> list[str]:
        if self._console_wait is None:
            self._console_wait = ConsoleWait.from_config(self.host_key_wait)
        found = poll_host_keys(self.ec2, node.id, self._console_wait, self.sleep)
        self.events(found_text(found, node.name, self._console_wait.waited))
        return found.keys

    # -- teardown --------------------------------------------------------------------------
    def terminate(self, cluster: ClusterConfig) -> Removed:
        try:
            with translated(f"tearing down {cluster.name} in {self.region}"):
                removed = aws_teardown.remove_all(self.ec2, self.clients.client("iam"), cluster.name, self.region,
                                                  self.owner(), self.instance_wait, self.sleep, self.events)
        except ProviderError as exc:
            raise aws_owner.not_yours(self.ec2, cluster.name, self.owner(), exc) from exc.__cause__
        counts = ", ".join(f"{len(v)} {k}" for k, v in removed.items.items() if v) or "nothing"
        self.events(f"terminate {cluster.name}: removed {counts}")
        return removed

    # -- prices and plan (read-only) -------------------------------------------------------
    def _pricing(self) -> Any:
        return self.clients.client("pricing", region="us-east-1", retries=OPTIONAL_RETRIES)

    def prices(self, cluster: ClusterConfig) -> dict[str, PriceQuote]:
        with translated("reading prices"):
            return quote(self.ec2, self._pricing(), cluster.section(AwsSettings).instance_types, self.region)

    def placement(self, cluster: ClusterConfig) -> Placement:
        aws = cluster.section(AwsSettings)
        return Placement(aws.region, aws.instance_types[0], aws.effective_master_market, aws.worker_market)

    def plan_notes(self, cluster: ClusterConfig) -> tuple[str, ...]:
        return aws_plan.plan_notes(cluster)

    def machine_topology(self, instance_type: str) -> CpuTopology:
        return aws_plan.machine_topology(instance_type)

    def planned_resources(self, cluster: ClusterConfig) -> list[PlannedResource]:
        with translated(f"planning {cluster.name} in {self.region}"):
            return aws_plan.planned_resources(self.ec2, self.clients.client("iam"), cluster, self.ssh_cidr(cluster),
                                              self.region)
