"""The sections of cluster.yaml that every provider shares: ssh:, storage:, pip: and apt:."""
from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from xeoncluster.providers.registry import is_storage_url, storage_forms


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SshSettings(Strict):
    user: str | None = None
    cidr: str = "auto"
    timeout: int = Field(default=300, ge=5, le=3600, strict=True)
    address: Literal["public", "private"] = "public"

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, value: str) -> str:
        if value == "auto":
            return value
        try:
            return str(ipaddress.ip_network(value, strict=True))
        except ValueError:
            raise ValueError("must be 'auto' or a network such as 203.0.113.7/32") from None

    @property
    def world_open(self) -> bool:
        return self.cidr != "auto" and ipaddress.ip_network(self.cidr).prefixlen == 0


class StorageSettings(Strict):
    """Where runs keep what must outlive the nodes (checkpoints, logs, results): `auto` (S3 on AWS: the
    provider's own default), a URL of the provider's storage (registry.storage_forms()), or an absolute
    folder. `storage: URL` is short for `storage: {url: URL}`."""

    url: str = "auto"
    keep_checkpoints: int = Field(default=3, ge=1, le=100, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"url": _storage_url(value)} if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _storage_url(value)


def _storage_url(value: str) -> str:
    if value == "auto" or re.fullmatch(r"/\S*|file:///\S*", value) or is_storage_url(value):
        return value.rstrip("/") if value not in ("/", "file:///") else value
    raise ValueError(f"must be auto, {storage_forms()}")


class PipSettings(Strict):
    """A company mirror or CodeArtifact: nodes may not reach PyPI or the stack's own indexes."""

    index_url: str | None = None
    extra_index_urls: list[str] = Field(default_factory=list)

    @field_validator("index_url")
    @classmethod
    def _index_url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)

    @field_validator("extra_index_urls")
    @classmethod
    def _extra(cls, value: list[str]) -> list[str]:
        return [_http_url(url) for url in value]


class AptSettings(Strict):
    sources: list[str] = Field(default_factory=list)
    proxy: str | None = None

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: list[str]) -> list[str]:
        for line in value:
            if not re.match(r"^deb(-src)? (\[[^\]]*\] )?https?://\S+ \S+", line) or "\n" in line:
                raise ValueError(f"'{line}' is not a one-line apt source such as "
                                 "'deb http://mirror.example/ubuntu noble main universe'")
        return value

    @field_validator("proxy")
    @classmethod
    def _proxy(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value)


def _http_url(value: str) -> str:
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", value):
        raise ValueError(f"'{value}' is not an http(s) URL")
    return value
