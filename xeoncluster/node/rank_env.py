"""The environment contract with the ranks: every XC_* variable, what it means, and who sets it.

The launchers (train_plan.py and script_plan.py for `train`, kube/launch.py and kube/pod.py for
`export`) set them; this package reads them. The names live here, on the lowest floor, because the
ranks import nothing above it.
"""
from __future__ import annotations

from dataclasses import dataclass

XC_STACK = "XC_STACK"
XC_ENV_FILE = "XC_ENV_FILE"
XC_STOP_FILE = "XC_STOP_FILE"
XC_STOP_GRACE = "XC_STOP_GRACE"
XC_NOTICES = "XC_NOTICES"
XC_NOTICE_POLICY = "XC_NOTICE_POLICY"
XC_NOTICE_INTERVAL = "XC_NOTICE_INTERVAL"
XC_NOTICE_MARGIN = "XC_NOTICE_MARGIN"
XC_OUTPUT_DIR = "XC_OUTPUT_DIR"
XC_DATA_DIR = "XC_DATA_DIR"
XC_RUN = "XC_RUN"
XC_WORKDIR = "XC_WORKDIR"
XC_RESUME = "XC_RESUME"
XC_RESUME_FROM = "XC_RESUME_FROM"
XC_NODE_INDEX = "XC_NODE_INDEX"
XC_BATCH_WORLD = "XC_BATCH_WORLD"
XC_HOLD_FILE = "XC_HOLD_FILE"
XC_HOLD_SECONDS = "XC_HOLD_SECONDS"
XC_WARM_START = "XC_WARM_START"

STOP_FILE = "stop-request"  # in the run's folder on every node: its presence asks the ranks to stop


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    set_by: str


CONTRACT: tuple[Variable, ...] = (
    Variable(XC_STACK, "the software stack the node image carries (stock, intel)", "train_plan, kube/launch"),
    Variable(XC_ENV_FILE, "a 0600 JSON file of --env values, loaded before anything else", "train_plan"),
    Variable(XC_STOP_FILE, "a file whose presence asks the ranks to checkpoint and stop", "train_plan, user_script"),
    Variable(XC_STOP_GRACE, "seconds a script has to save and exit after SIGTERM (default 30)", "the user"),
    Variable(XC_NOTICES, "the provider's interruption sources the ranks poll (comma-separated)", "train_plan"),
    Variable(XC_NOTICE_POLICY, "'report' when an agent supervises (it replaces the node), else 'stop'", "train_plan"),
    Variable(XC_NOTICE_INTERVAL, "seconds between notice polls (default 2)", "the user"),
    Variable(XC_NOTICE_MARGIN, "seconds before a notice's deadline to stop by", "the user"),
    Variable(XC_OUTPUT_DIR, "a script's output folder (its checkpoints and results)", "script_plan, user_script"),
    Variable(XC_DATA_DIR, "the folder holding the --data files", "script_plan"),
    Variable(XC_RUN, "the run's name", "script_plan"),
    Variable(XC_WORKDIR, "the script's copied workdir", "script_plan"),
    Variable(XC_RESUME, "'1' when the script resumes from a checkpoint", "user_script"),
    Variable(XC_RESUME_FROM, "the newest complete checkpoint in the output folder", "user_script"),
    Variable(XC_NODE_INDEX, "the pod's node index on Kubernetes", "kube/pod"),
    Variable(XC_BATCH_WORLD, "the world size the run's global batch was set for; WORLD_SIZE differs after a "
             "shrink or a grow-back, and the batch is per rank x accumulation x this", "train_plan"),
    Variable(XC_HOLD_FILE, "a job started ahead of a swap: the ranks start, join, load the model and the data, then "
             "wait for this file before they resume from the newest checkpoint", "agent/prestart"),
    Variable(XC_HOLD_SECONDS, "how long such ranks wait for their release before they give up (default 600)",
             "agent/prestart"),
    Variable(XC_WARM_START, "'0': ranks MPI starts are not forked from the node's warm server (warm_start) but start "
             "cold", "the user"),
)
