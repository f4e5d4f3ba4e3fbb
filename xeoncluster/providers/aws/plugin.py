"""The AWS provider's plugin: boto3 loads when a provider is built or a policy printed, not before."""
from __future__ import annotations

from typing import Any

from xeoncluster.providers.aws import catalog
from xeoncluster.providers.aws.spec import AWS, AwsSettings
from xeoncluster.providers.base import Provider
from xeoncluster.providers.config import ClusterConfig
from xeoncluster.providers.plugin import Events, Machine, MachineCatalog, ProviderPlugin


def make(cluster: ClusterConfig, events: Events) -> Provider:
    from xeoncluster.providers.aws.provider import AwsProvider

    aws = cluster.section(AwsSettings)
    return AwsProvider(region=aws.region or "us-east-1", profile=aws.profile, events=events)


def access_documents(account: str, boundary: bool) -> tuple[dict[str, Any], str]:
    from xeoncluster.providers.aws.access import access_documents as documents

    return documents(account, boundary)


class InstanceCatalog:
    """EC2's Xeon instance types (catalog.py), as MachineCatalog asks."""

    def machine(self, name: str) -> Machine | None:
        kind = catalog.lookup(name)
        if kind is None:
            return None
        return Machine(kind.name, kind.vcpus, kind.threads_per_core, kind.memory_gib, catalog.topology_of(kind))

    def nearest(self, name: str) -> str | None:
        return catalog.nearest(name)

    def known_names(self) -> tuple[str, ...]:
        return catalog.known_names()


def instance_catalog() -> MachineCatalog:
    return InstanceCatalog()


AWS_PLUGIN = ProviderPlugin(spec=AWS, make=make, access_documents=access_documents, catalog=instance_catalog)
