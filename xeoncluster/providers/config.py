"""The cluster.yaml schema, its defaults, and CLI overrides.

Every validation failure becomes one ConfigError line that names the key, the bad value and what
is allowed, so nothing downstream ever sees an invalid config.
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

import yaml
from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from xeoncluster.core.errors import ConfigError
from xeoncluster.providers.registry import DEFAULT_PROVIDER, check_image, moved_keys, spec_for, specs
from xeoncluster.providers.shared_settings import (
    AptSettings,
    PipSettings,
    SshSettings,
    StorageSettings,
    Strict,
)

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,23}$"
FLAGS = {"name": "--name", "provider": "--provider", "region": "--region", "profile": "--profile",
         "nodes": "--nodes", "image": "--image", "stack": "--stack", "market": "--market",
         "instance_types": "--instance-type"}

Section = TypeVar("Section", bound=BaseModel)


class SharedConfig(Strict):
    """The keys every provider shares. ClusterConfig adds each provider's own section (spec.settings) under
    its name; a provider reads its section typed, through section()."""

    name: str = Field(default="xc", pattern=NAME_PATTERN)
    provider: str = DEFAULT_PROVIDER
    nodes: int = Field(default=2, ge=1, le=256, strict=True)
    ssh: SshSettings = Field(default_factory=SshSettings)
    image: str = "auto"
    stack: Literal["stock", "intel"] = "stock"
    image_strategy: Literal["bake-first", "parallel"] = "parallel"
    pip: PipSettings = Field(default_factory=PipSettings)
    storage: StorageSettings = Field(default_factory=StorageSettings)
    idle_minutes: float = Field(default=60, ge=0, le=525600, strict=True, allow_inf_nan=False)
    max_hours: float | None = Field(default=None, ge=0, le=8760, strict=True, allow_inf_nan=False)
    max_cost: float | None = Field(default=None, ge=0, le=10_000_000, strict=True, allow_inf_nan=False)
    orphan_minutes: float = Field(default=15, ge=0, le=10080, strict=True, allow_inf_nan=False)
    apt: AptSettings = Field(default_factory=AptSettings)

    @property
    def moved_notes(self) -> list[str]:
        """One line per key of the file that moved to its provider's section (cluster.yaml before 0.2)."""
        return list(self._moved)

    @field_validator("provider")
    @classmethod
    def _provider(cls, value: str) -> str:
        names = list(specs())
        if value not in names:
            raise ValueError(f"must be one of {', '.join(repr(n) for n in names)}")
        return value

    _moved: list[str] = PrivateAttr(default_factory=list)  # lines: the file's keys that moved to a section

    @model_validator(mode="before")
    @classmethod
    def _to_sections(cls, data: Any) -> Any:
        return moved_to_sections(data) if isinstance(data, dict) else data

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image(value)

    def section(self, settings: type[Section]) -> Section:
        """The provider section whose model is `settings`: cluster.section(MySettings).key."""
        name = next(spec.name for spec in specs().values() if spec.settings is settings)
        found = getattr(self, name)
        assert isinstance(found, settings)
        return found

    @model_validator(mode="after")
    def _provider_defaults(self) -> Self:
        spec = spec_for(self.provider)
        section = getattr(self, spec.name, None)
        if section is not None:
            spec.complete(section)
        if self.ssh.user is None:
            self.ssh.user = spec.default_user
        if self.max_hours and self.max_hours * 60 < spec.up_minutes:
            raise ValueError(f"max_hours {self.max_hours:g} is shorter than an `up` on {self.provider} can take "
                             f"({spec.up_minutes:g} minutes): use at least {spec.up_minutes / 60:.2g}, or 0 for none")
        return self


def _with_provider_sections() -> type[SharedConfig]:
    sections: dict[str, Any] = {spec.name: (spec.settings, Field(default_factory=spec.settings))
                                for spec in specs().values() if spec.settings is not None}
    return create_model("ClusterConfig", __base__=SharedConfig, __module__=__name__,
                        __doc__="cluster.yaml: the shared keys and each provider's own section.", **sections)


# The provider sections come from the registry at run time; what mypy checks is the shared keys, and
# each provider reads its own section typed through section().
if TYPE_CHECKING:
    ClusterConfig = SharedConfig
else:
    ClusterConfig = _with_provider_sections()


def _sections() -> dict[str, set[str]]:
    """The valid keys of the top level and of each section (ssh:, pip:, a provider's own ...)."""
    paths = {"": set(ClusterConfig.model_fields)}
    for name, field in ClusterConfig.model_fields.items():
        model = field.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            paths[name] = set(model.model_fields)
    return paths


FIELD_PATHS = _sections()


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


def moved_to_sections(data: Mapping[str, Any]) -> dict[str, Any]:
    """Keys that were top-level before 0.2 (and the CLI's --region, --market, ... overrides) go to their
    provider's section; a top-level value wins over the section's."""
    result = dict(data)
    for key, section in moved_keys().items():
        if key in result:
            result[section] = {**dict(result.get(section) or {}), key: result.pop(key)}
    return result


def placed(key: str) -> str:
    """Where a key lives now: `section.key` for one that moved, else the key."""
    section = moved_keys().get(key)
    return f"{section}.{key}" if section else key


def moved_line(source: str, key: str) -> str:
    return f"{source}: '{key}' is now '{placed(key)}' (the old place still works)"


def load_config(path: Path | None, overrides: Mapping[str, Any] | None = None) -> ClusterConfig:
    data = read_yaml(path) if path is not None else {}
    merged = moved_to_sections(merge_overrides(data, overrides or {}))
    source = str(path) if path is not None else "config"
    try:
        config = ClusterConfig.model_validate(merged)
    except ValidationError as exc:
        given = [key for key, value in (overrides or {}).items() if value is not None and key in FLAGS]
        raise ConfigError(describe_error(exc, source, merged, {placed(k): FLAGS[k] for k in given})) from None
    config._moved = [moved_line(source, key) for key in moved_keys() if key in data]
    return config


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
    models: list[type[BaseModel]] = [ClusterConfig, SshSettings]
    models += [spec.settings for spec in specs().values() if spec.settings is not None]
    for model in models:
        for name, field in model.model_fields.items():
            low = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
            high = next((m.le for m in field.metadata if getattr(m, "le", None) is not None), None)
            if low is not None and high is not None:
                result[name] = (low, high)
    return result
