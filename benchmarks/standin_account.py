"""What an administrator does once per account before anyone runs `up` (docs/aws.md): create the
permissions boundary every role the tool makes must carry. On the stand-in, with its admin key, through
`aws-standin.sh user`, which also makes a user holding exactly the documented policy."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from xeoncluster.providers.aws.boundary import boundary_document  # noqa: E402 - this checkout's
from xeoncluster.providers.aws.policy import policy_document  # noqa: E402 - this checkout's
from xeoncluster.standin.ec2_errors import ACCOUNT  # noqa: E402 - this checkout's


def create_boundary(work: Path) -> None:
    policy, boundary = work / "user-policy.json", work / "boundary.json"
    policy.write_text(json.dumps(policy_document(ACCOUNT)))
    boundary.write_text(json.dumps(boundary_document(ACCOUNT)))
    subprocess.run([str(REPO / "scripts" / "aws-standin.sh"), "user", "bench-user", str(policy), str(boundary)],
                   check=True, capture_output=True, text=True)
