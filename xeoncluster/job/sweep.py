"""`train --sweep KEY=V1,V2,...`: one run per combination of the swept values, queued on the cluster.

Each run gets its values as the user would have written them after `--`: `{KEY}` in those arguments
becomes the value where it appears; otherwise `--KEY VALUE` is added at the end. So a built-in task
takes `--sweep lr=1e-4,3e-4` as its own `--lr`, and a script reads `--lr` like any option.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field, replace

from xeoncluster.core.errors import ConfigError
from xeoncluster.job.train_request import AnyRequest

KEY = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
MAX_RUNS = 64  # a sweep larger than this is more likely a typo than a plan; split it into several
RESERVED = ("output", "data")  # {output} and {data} in a script's arguments are the run's folders
SWEEP_HINT = "write it as --sweep KEY=V1,V2,... (repeat --sweep for more keys: every combination is run)"


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Point:
    """One run of a sweep: its name's base (the sweep) and its values; a run outside a sweep has none."""

    sweep: str = ""
    params: dict[str, str] = field(default_factory=dict)


def parse_axes(pairs: tuple[str, ...]) -> tuple[Axis, ...]:
    axes: list[Axis] = []
    for pair in pairs:
        key, sep, listed = pair.partition("=")
        values = tuple(v.strip() for v in listed.split(","))
        if not sep or not KEY.fullmatch(key):
            raise ConfigError(f"--sweep {pair!r} needs KEY=V1,V2,... with KEY a name like lr or batch_size",
                              hint=SWEEP_HINT)
        if not all(values) or len(set(values)) != len(values):
            raise ConfigError(f"--sweep {key} has an empty or repeated value ({listed!r})", hint=SWEEP_HINT)
        if key in RESERVED:
            raise ConfigError(f"--sweep {key}: {{{key}}} already means the run's {key} folder in a script's "
                              "arguments", hint="sweep an option of another name")
        if key in (a.key for a in axes):
            raise ConfigError(f"--sweep {key} is given twice", hint="list all its values in one --sweep: "
                              f"--sweep {key}=V1,V2,...")
        axes.append(Axis(key, values))
    runs = 1
    for axis in axes:
        runs *= len(axis.values)
    if runs > MAX_RUNS:
        raise ConfigError(f"the sweep makes {runs} runs, more than {MAX_RUNS}", hint="sweep fewer values at once")
    return tuple(axes)


def points(sweep: str, axes: tuple[Axis, ...]) -> list[tuple[str, Point]]:
    """Every combination as (run name, point): SWEEP-1 ... SWEEP-N, the last key varying fastest."""
    keys = [a.key for a in axes]
    combos = itertools.product(*(a.values for a in axes))
    return [(f"{sweep}-{i}", Point(sweep, dict(zip(keys, combo, strict=True)))) for i, combo in enumerate(combos, 1)]


def with_params(request: AnyRequest, params: dict[str, str]) -> AnyRequest:
    args = list(request.trainer_args)
    for key, value in params.items():
        placeholder = "{" + key + "}"
        if any(placeholder in arg for arg in args):
            args = [arg.replace(placeholder, value) for arg in args]
        else:
            args += [f"--{key}", value]
    return replace(request, trainer_args=tuple(args))
