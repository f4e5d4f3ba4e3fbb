"""The cluster.yaml schema, its defaults, and CLI overrides.

Every validation failure becomes one ConfigError line that names the key, the bad value and what
is allowed, so nothing downstream ever sees an invalid config.
"""
from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,23}$"
IMAGE_PATTERN = re.compile(r"^(auto|none|ami-[0-9a-f]{8,17}|local-[0-9a-f]{8,64})$")
INSTANCE_TYPE_PATTERN = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9-]+$")
REGION_PATTERN = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
DEFAULT_LOCAL_ROOT = Path("/var/lib/xeoncluster")
HOMES = Path("/root")
FLAGS = {"name": "--name", "provider": "--provider", "region": "--region", "profile": "--profile",
         "nodes": "--nodes", "image": "--image", "stack": "--stack", "market": "--market",
         "instance_types": "--instance-type"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SshSettings(_Strict):
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


class LocalSettings(_Strict):
    subnet: str = "10.213.0.0/24"
    root: Path = DEFAULT_LOCAL_ROOT
    cpus_per_node: int | None = Field(default=None, ge=1, le=4096, strict=True)

    @field_validator("subnet")
    @classmethod
    def _subnet(cls, value: str) -> str:
        try:
            net = ipaddress.IPv4Network(value, strict=True)
        except ValueError:
            raise ValueError("must be a private IPv4 network such as 10.213.0.0/24") from None
        if not net.is_private or net.prefixlen > 28 or net.prefixlen < 16:
            raise ValueError("must be a private IPv4 network between /16 and /28")
        return str(net)

    @field_validator("root")
    @classmethod
    def _root(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("must be an absolute path")
        if value == HOMES or HOMES in value.parents:
            raise ValueError("must be outside /root: local nodes' homes are overlaid at /root")
        return value


class PipSettings(_Strict):
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


class AptSettings(_Strict):
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
    if not re.match(r"^https?://[^\s/]+(/\S*)?$", value):
        raise ValueError(f"'{value}' is not an http(s) URL")
    return value


class ClusterConfig(_Strict):
    name: str = Field(default="xc", pattern=NAME_PATTERN)
    provider: Literal["aws", "local"] = "aws"
    nodes: int = Field(default=2, ge=1, le=256, strict=True)
    region: str | None = None
    profile: str | None = None
    instance_types: list[str] = Field(default_factory=lambda: ["c7i.2xlarge"], min_length=1)
    market: Literal["spot", "on-demand"] = "spot"
    master_market: Literal["spot", "on-demand"] | None = None
    on_demand_fallback: bool = False
    zones: list[str] = Field(default_factory=list)
    root_volume_gib: int = Field(default=100, ge=8, le=16384, strict=True)
    placement_group: bool = False
    vpc_id: str | None = Field(default=None, pattern=r"^vpc-[0-9a-f]{8,17}$")
    ssh: SshSettings = Field(default_factory=SshSettings)
    image: str = "auto"
    stack: Literal["stock", "intel"] = "stock"
    image_strategy: Literal["bake-first", "parallel"] = "parallel"
    local: LocalSettings = Field(default_factory=LocalSettings)
    pip: PipSettings = Field(default_factory=PipSettings)
    apt: AptSettings = Field(default_factory=AptSettings)

    @field_validator("region")
    @classmethod
    def _region(cls, value: str | None) -> str | None:
        if value is not None and not REGION_PATTERN.match(value):
            raise ValueError("must be an AWS region such as us-east-1")
        return value

    @field_validator("instance_types")
    @classmethod
    def _instance_types(cls, value: list[str]) -> list[str]:
        for item in value:
            if not INSTANCE_TYPE_PATTERN.match(item):
                raise ValueError(f"'{item}' is not an instance type such as c7i.2xlarge")
        if len(set(value)) != len(value):
            raise ValueError("lists an instance type twice")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if not IMAGE_PATTERN.match(value):
            raise ValueError("must be 'auto', 'none', an AMI id (ami-...) or a local image id (local-...)")
        return value

    @model_validator(mode="after")
    def _provider_defaults(self) -> ClusterConfig:
        if self.provider == "aws" and self.region is None:
            object.__setattr__(self, "region", default_region(self.profile))
        if self.ssh.user is None:
            self.ssh.user = "root" if self.provider == "local" else "ubuntu"
        return self

    @property
    def effective_master_market(self) -> str:
        return self.master_market or self.market


def default_region(profile: str | None) -> str:
    """What the AWS CLI would use: AWS_REGION, then AWS_DEFAULT_REGION or the profile's region, then us-east-1.

    botocore itself reads only AWS_DEFAULT_REGION, so AWS_REGION is looked at here."""
    import botocore.exceptions
    import botocore.session

    if os.environ.get("AWS_REGION"):
        return os.environ["AWS_REGION"]
    try:
        region = botocore.session.Session(profile=profile).get_config_variable("region")
    except botocore.exceptions.BotoCoreError:
        region = None  # a missing profile is reported by the preflight, with its own hint
    return str(region or "us-east-1")


FIELD_PATHS: dict[str, set[str]] = {
    "": set(ClusterConfig.model_fields),
    "ssh": set(SshSettings.model_fields),
    "local": set(LocalSettings.model_fields),
    "pip": set(PipSettings.model_fields),
    "apt": set(AptSettings.model_fields),
}


def default_config_path(cwd: Path | None = None) -> Path | None:
    candidate = (cwd or Path.cwd()) / "cluster.yaml"
    return candidate if candidate.is_file() else None


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror}",
                          hint="pass --config PATH to an existing file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})",
                          hint="save the config as UTF-8 YAML") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML{where}", hint="check indentation and quoting") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    return data


def merge_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Apply CLI overrides (dotted keys allowed, e.g. 'ssh.cidr') on top of file values."""
    merged: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items()}
    for dotted, value in overrides.items():
        if value is None:
            continue
        head, _, tail = dotted.partition(".")
        if tail:
            section = merged.setdefault(head, {})
            if not isinstance(section, dict):
                raise ConfigError(f"config: '{head}' must be a mapping, got {section!r}")
            section[tail] = value
        else:
            merged[head] = value
    return merged


def load_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> ClusterConfig:
    data = read_yaml(path) if path is not None else {}
    merged = merge_overrides(data, overrides or {})
    source = str(path) if path is not None else "config"
    try:
        return ClusterConfig.model_validate(merged)
    except ValidationError as exc:
        flags = {key: FLAGS[key] for key, value in (overrides or {}).items() if value is not None and key in FLAGS}
        raise ConfigError(describe_error(exc, source, merged, flags)) from None


def describe_error(exc: ValidationError, source: str, data: Mapping[str, Any],
                   flags: Mapping[str, str] | None = None) -> str:
    """`flags`: config key -> the CLI flag that set it; a bad value from a flag is named by the flag."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    key = ".".join(loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"{source}: unknown key '{key}'{_suggestion(loc)}"
    value = _lookup(data, error["loc"])
    shown = "missing" if value is _MISSING else f"got {value!r}"
    flag = next((flag for name, flag in (flags or {}).items() if key == name or key.startswith(name + ".")), None)
    return f"{flag}: {_allowed(error)} ({shown})" if flag else f"{source}: {key}: {_allowed(error)} ({shown})"


_MISSING = object()


def _lookup(data: Any, loc: tuple[Any, ...]) -> Any:
    current = data
    for part in loc:
        try:
            current = current[part]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return current


def _suggestion(loc: list[str]) -> str:
    section = ".".join(loc[:-1])
    valid = FIELD_PATHS.get(section, set())
    match = difflib.get_close_matches(loc[-1], sorted(valid), n=1, cutoff=0.6)
    if match:
        return f" (did you mean '{(section + '.' if section else '') + match[0]}'?)"
    return f"; valid keys here: {', '.join(sorted(valid))}" if valid else ""


def _allowed(error: Mapping[str, Any]) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind in ("greater_than_equal", "less_than_equal"):
        return _range_text(error)
    if kind == "string_pattern_mismatch":
        return "must be lowercase letters, digits and '-', starting with a letter, at most 24 characters" \
            if error["loc"][-1] == "name" else f"must match {ctx.get('pattern')}"
    if kind == "too_short":
        return "must list at least one entry"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return error["msg"][0].lower() + error["msg"][1:]


def _range_text(error: Mapping[str, Any]) -> str:
    field = error["loc"][-1]
    bounds = {name: info for name, info in _bounds().items() if name == field}
    if field in bounds:
        low, high = bounds[field]
        return f"must be between {low} and {high}"
    return error["msg"][0].lower() + error["msg"][1:]


def _bounds() -> dict[str, tuple[int, int]]:
    result: dict[str, tuple[int, int]] = {}
    for model in (ClusterConfig, SshSettings, LocalSettings):
        for name, field in model.model_fields.items():
            low = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
            high = next((m.le for m in field.metadata if getattr(m, "le", None) is not None), None)
            if low is not None and high is not None:
                result[name] = (low, high)
    return result
