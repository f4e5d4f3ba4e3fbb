"""A run record read from the master or from storage, checked before any of it is shown or used.

The run's name becomes a folder and a storage key here; the swept values, the sweep's name and the
node names of its usage are shown in tables. The master wrote all of them (xeoncluster/cluster/untrusted.py).
"""
from __future__ import annotations

from pydantic import ValidationError

from xeoncluster.cluster import untrusted
from xeoncluster.job.sweep import KEY
from xeoncluster.job.train_request import RUN_NAME
from xeoncluster.runs.record import RunRecord

VALUE_LIMIT = 200


def checked(record: RunRecord, source: str) -> RunRecord:
    untrusted.run_name(record.run, source)
    if record.sweep and not RUN_NAME.fullmatch(record.sweep):
        raise untrusted.refused(source, "sweep", record.sweep, "not a run name")
    for key, value in record.params.items():
        if not KEY.fullmatch(key):
            raise untrusted.refused(source, "swept setting", key, "not a setting name")
        if not untrusted.printable(value, VALUE_LIMIT):
            raise untrusted.refused(source, f"a value of {key}", value[:80],
                                    f"not one printable line of up to {VALUE_LIMIT} characters")
    for name in record.usage:
        untrusted.node_name(name, source)
    return record


def not_a_record(exc: ValidationError) -> str:
    """Where a record failed its model, in one short line."""
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the text"
    return f"not a run record: {where}: {first['msg']}"[:160]
