"""`xeoncluster storage init`: the administrator's one-time step that makes the provider's run storage
for a region and locks it down (on AWS: the account's `xeoncluster-ACCOUNT-REGION` bucket, private,
encrypted, ACLs off, TLS only). Users' policies may not change a bucket's policy or access, so a
bucket that lacks any of that is fixed here, by the administrator, never by a user's `up`."""
from __future__ import annotations

from xeoncluster.cluster.command_context import CommandContext
from xeoncluster.storage.base import StorageLocation


def init_storage(ctx: CommandContext) -> StorageLocation:
    return ctx.provider.storage_location(ctx.config, ctx.config.storage.url, ctx.state.home / "storage", create=True,
                                         setup=True)


def root_url(location: StorageLocation) -> str:
    """The storage itself, without the caller's own prefix below it."""
    return location.url.removesuffix(f"/{location.prefix}") if location.prefix else location.url
