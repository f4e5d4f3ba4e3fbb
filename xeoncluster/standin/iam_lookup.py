"""What authorizing a request needs to know about the resources it names: their tags, the condition
keys AWS derives from them (an image's owner, an instance's type, a subnet's VPC), the role in an
instance profile, a role's permissions boundary, a bucket's account.

`Lookup` knows nothing (every answer is "none"); `TagsOnly` knows tags from a function; the stand-in
asks moto (moto_lookup.py)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from xeoncluster.standin.iam_policy import Values

TagsOf = Callable[[str], Mapping[str, str]]


@dataclass(frozen=True)
class RoleFacts:
    arn: str
    boundary: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)


class Lookup:
    def tags(self, kind: str, ref: str) -> Mapping[str, str]:
        """The tags of an EC2 resource, by its kind (`instance`, `key-pair`...) and its id or name."""
        return {}

    def keys(self, kind: str, ref: str) -> Mapping[str, Values]:
        """The condition keys AWS derives from an existing EC2 resource, such as `ec2:Owner`."""
        return {}

    def role(self, name: str) -> RoleFacts | None:
        return None

    def profile_role(self, profile: str) -> str | None:
        """The ARN of the role in an instance profile, by the profile's name or ARN."""
        return None

    def profile_tags(self, profile: str) -> Mapping[str, str]:
        """The tags of an instance profile, by its name."""
        return {}

    def bucket_account(self, bucket: str) -> str | None:
        return None


@dataclass(frozen=True)
class TagsOnly(Lookup):
    """Tags by resource id alone, as the unit tests give them."""

    tags_of: TagsOf

    def tags(self, kind: str, ref: str) -> Mapping[str, str]:
        return self.tags_of(ref)


def as_lookup(lookup: Lookup | TagsOf) -> Lookup:
    return lookup if isinstance(lookup, Lookup) else TagsOnly(lookup)
