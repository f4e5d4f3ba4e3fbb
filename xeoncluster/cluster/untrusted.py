"""The one door from the cluster to this machine: what the master or storage says is checked here
before it becomes a path, an ssh_config line, a pinned key or a shell word.

The master runs the user's script and every package it installs, and its role can write to storage
and tag instances, so nothing it wrote is evidence of anything. Each check refuses (never escapes or
repairs) a value outside its rule, with one line naming where it came from. Rules are matched whole
(`fullmatch`): a trailing newline is a refusal, not a match.
"""
from __future__ import annotations

import ipaddress
import json
import math
import re
from pathlib import Path
from typing import Annotated

from pydantic import Field

from xeoncluster.core.errors import XeonClusterError
from xeoncluster.job.train_request import RUN_NAME
from xeoncluster.providers.base import Node
from xeoncluster.providers.node_kinds import Role

NODE_NAME = re.compile(r"node\d{1,4}")
ROLES = tuple(Role)
HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"(?=.{{1,253}}\Z){HOST_LABEL}(?:\.{HOST_LABEL})*\.?")
KEY_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
             "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
HOST_KEY = re.compile(rf"(?:{'|'.join(re.escape(t) for t in KEY_TYPES)}) [A-Za-z0-9+/]{{1,16384}}={{0,2}}")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# Numbers in records from the cluster: finite, and in a range no honest record leaves. Beyond it a value
# is forged, and formatting it overflows (time.localtime(1e300)) or hides every other run in a table.
LATEST = 2 ** 33   # a clock time in seconds: the year 2242
MOST = 1e15        # seconds, dollars, bytes per second, percent: far above any real one
MOST_STEPS = 2 ** 53
Timestamp = Annotated[float, Field(ge=0, le=LATEST, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0, le=MOST, allow_inf_nan=False)]
Measure = Annotated[float, Field(ge=-MOST, le=MOST, allow_inf_nan=False)]  # a loss or a score: either sign
Count = Annotated[int, Field(ge=0, le=MOST_STEPS)]
ExitCode = Annotated[int, Field(ge=-(2 ** 31), le=2 ** 31)]  # negative: the signal that ended the job
Pid = Annotated[int, Field(ge=1, le=2 ** 22)]  # Linux's PID_MAX_LIMIT; 0 or -1 would make `kill` signal a group

HINT = ("the cluster's master (or a process on it) wrote what this machine refuses to use; "
        "`xeoncluster down` removes the cluster if it cannot be trusted")


class Refused(XeonClusterError):
    """Data from the master, the provider's tags or storage that fails its rule: the cluster
    misbehaves (exit 1); it is not bad input from the user."""


def refused(source: str, what: str, value: object, why: str) -> Refused:
    return Refused(f"{source} names {what} {value!r}: refused ({why})", hint=HINT)


def node_name(value: str, source: str) -> str:
    if not NODE_NAME.fullmatch(value):
        raise refused(source, "node", value, "not a node name")
    return value


def address(value: str, source: str, what: str = "address", empty: bool = False) -> str:
    """An IP address (no IPv6 scope: anything may follow its '%'), or a DNS name; `empty`: "" too."""
    if value == "" and empty:
        return value
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        if HOSTNAME.fullmatch(value) and not CONTROL.search(value):
            return value
        raise refused(source, what, value, "not an IP address or host name") from None
    if isinstance(ip, ipaddress.IPv6Address) and ip.scope_id is not None:
        raise refused(source, what, value, "a scoped IPv6 address")
    return value


def instance_id(value: str, rule: re.Pattern[str], source: str) -> str:
    if not rule.fullmatch(value):
        raise refused(source, "instance id", value, f"not an id of the form {rule.pattern}")
    return value


def node(value: Node, source: str, id_rule: re.Pattern[str] | None = None) -> Node:
    """Every field that reaches a file, a command or a connection: name, addresses, role, and the
    instance id where the provider's format is given."""
    node_name(value.name, source)
    address(value.ssh_host, source, f"{value.name}'s address")
    address(value.private_ip, source, f"{value.name}'s private address", empty=True)
    if value.role not in ROLES:
        raise refused(source, f"{value.name}'s role", value.role, "neither master nor worker")
    if id_rule is not None:
        instance_id(value.id, id_rule, source)
    return value


def host_key(value: str, source: str) -> str:
    """`TYPE BASE64`, one line, of a type OpenSSH pins."""
    if not HOST_KEY.fullmatch(value):
        raise refused(source, "host key", value, "not a single 'TYPE BASE64' host key")
    return value


def run_name(value: str, source: str) -> str:
    if not RUN_NAME.fullmatch(value):
        raise refused(source, "run", value, "not a run name")
    return value


def same_run(value: str, asked: str, source: str) -> str:
    """A record read for run `asked` must be that run's."""
    run_name(value, source)
    if value != asked:
        raise refused(source, "run", value, f"the run asked for is '{asked}'")
    return value


def under(root: Path, relative: str | Path) -> Path:
    """`root / relative`, resolved, and required to stay below `root`."""
    if Path(relative).is_absolute():
        raise refused("a path from the cluster", "path", str(relative), f"absolute, not under {root}")
    base = root.resolve()
    path = (base / relative).resolve()
    if base not in path.parents:
        raise refused("a path from the cluster", "path", str(relative), f"it leaves {root}")
    return path


def object_key(key: str, source: str) -> str:
    """A storage key as this tool writes them: '/'-separated names, none empty, '.' or '..'."""
    why = ("a control character" if CONTROL.search(key) else "a backslash" if "\\" in key
           else "a leading '/'" if key.startswith("/") else "")
    if not why:
        segments = key.split("/")
        why = ("an empty segment" if "" in segments else "a '..' segment" if ".." in segments
               else "a '.' segment" if "." in segments else "")
    if why:
        raise refused(source, "object key", key, why)
    return key


def key_below(key: str, prefix: str, source: str) -> str:
    """What follows `prefix/` in `key`, once both the key and that rest are found sound."""
    object_key(key, source)
    start = prefix.rstrip("/") + "/"
    if not key.startswith(start) or key == start:
        raise refused(source, "object key", key, f"not below {start}")
    return key[len(start):]


def finite(value: object) -> float | None:
    """A number read from the cluster (metrics.json), or None for anything else: a string, a bool,
    NaN, an infinity or a value beyond any honest one would crash the formatting that shows it."""
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) \
            and abs(value) <= MOST:
        return float(value)
    return None


def metrics_of(path: Path, source: str) -> dict[str, object]:
    """metrics.json as a mapping (text decoded with replacement); anything else is refused in one line."""
    try:
        data = json.loads(path.read_text(errors="replace"))
    except (OSError, ValueError) as exc:
        raise refused(source, "metrics", path.name, f"not JSON: {str(exc)[:80]}") from None
    if not isinstance(data, dict):
        raise refused(source, "metrics", path.name, "not a JSON object")
    return data


def printable(text: str, limit: int = 4000) -> bool:
    """Text read from the cluster that may be shown to the user as it is: no control characters (which
    could rewrite the terminal), and not endless."""
    return bool(text) and len(text) <= limit and text.isprintable()
