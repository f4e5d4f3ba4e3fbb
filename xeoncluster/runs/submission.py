"""What `train` hands the run agent: the request and the first launch plan (request.json), and the
--env values, kept apart in a file only the owner can read (env, mode 0600), as on the nodes."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from xeoncluster.job.train_plan import LaunchPlan
from xeoncluster.job.train_request import SCRIPT_TASK, AnyRequest, ScriptRequest, TaskRequest
from xeoncluster.storage.base import StorageLocation
from xeoncluster.wire.contract import VERSION

_REQUEST: TypeAdapter[AnyRequest] = TypeAdapter(Annotated[AnyRequest, Field(discriminator="kind")])
_PLAN = TypeAdapter(LaunchPlan)


@dataclass(frozen=True)
class Submission:
    request: AnyRequest
    plan: LaunchPlan
    storage: StorageLocation | None = None  # where the run keeps what must outlive the nodes
    keep_checkpoints: int = 3
    restore_step: int | None = None  # a checkpoint to bring back from storage first (the master lost it)
    # The nodes changed since the plan was made (a worker took the lost master's place): the agent prepares
    # the launch again before its first attempt.
    relaunch: bool = False

    def to_json(self) -> str:
        """The request without its --env values (only their names), and the plan."""
        public = replace(self.request, env=tuple((name, "") for name, _ in self.request.env))
        return json.dumps({"version": VERSION, "request": json.loads(_REQUEST.dump_json(public)),
                           "plan": json.loads(_PLAN.dump_json(self.plan)),
                           "storage": asdict(self.storage) if self.storage else None,
                           "keep_checkpoints": self.keep_checkpoints, "restore_step": self.restore_step,
                           "relaunch": self.relaunch}, indent=1)

    def env_json(self) -> str:
        return json.dumps(dict(self.request.env))

    @classmethod
    def from_json(cls, text: str, env_text: str = "{}") -> Submission:
        data = json.loads(text)
        request = _REQUEST.validate_python(_with_kind(data["request"]))
        values = json.loads(env_text or "{}")
        request = replace(request, env=tuple((name, str(values.get(name, ""))) for name, _ in request.env))
        storage = StorageLocation.from_dict(data["storage"]) if data.get("storage") else None
        return cls(request, _PLAN.validate_python(data["plan"]), storage, int(data.get("keep_checkpoints", 3)),
                   data.get("restore_step"), bool(data.get("relaunch", False)))


def _with_kind(request: dict[str, Any]) -> dict[str, Any]:
    """A request as CLIs before 0.2 wrote it (one form for both kinds, task "script" for a script, no
    kind) as its kind's, without the other kind's fields, which meant nothing to it."""
    if "kind" in request:
        return request
    variant = ScriptRequest if request.get("task") == SCRIPT_TASK else TaskRequest
    names = {f.name for f in fields(variant)}
    return {key: value for key, value in request.items() if key in names} | {"kind": variant.kind}
