"""`xeoncluster plan` as a user would run it, against a real moto server over HTTP on loopback.

    python benchmarks/moto_plan_demo.py

Starts `moto.server.ThreadedMotoServer` on 127.0.0.1 (a free port), then runs the real console
entry point in a subprocess with AWS_ENDPOINT_URL pointing at it and throwaway credentials:

1. `plan --nodes 4` on a fresh moto account. moto ships no Ubuntu SSM parameter, so the plan shows
   "base: unknown (SSM parameter missing)" and a warning that `up` would stop there.
2. `up --nodes 4` on the same account: stops with a one-line ConfigError (exit 2) before creating
   anything, which the script checks through boto3.
3. Seeds an image through boto3 (an instance from moto's stock AMI, then create_image) and runs
   `plan --nodes 4 --image <that AMI>`: a complete plan that needs no SSM parameter.

Nothing here touches AWS: every call goes to the local moto server. Prints each command's output.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REGION = "us-east-1"
CONFIG = """\
# The demo pins ssh.cidr: `auto` would ask checkip.amazonaws.com for this machine's address.
ssh:
  cidr: 203.0.113.7/32
"""


@dataclass
class Run:
    argv: list[str]
    code: int
    out: str
    err: str

    def show(self) -> str:
        text = f"$ xeoncluster {' '.join(self.argv)}\n{self.out}"
        if self.err.strip():
            text += "".join(f"[stderr] {line}\n" for line in self.err.strip().splitlines())
        return text + f"[exit {self.code}]\n"


def environment(endpoint: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION=REGION, AWS_EC2_METADATA_DISABLED="true",
               AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
               XEONCLUSTER_HOME=str(home / "xchome"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    return env


def xeoncluster(argv: list[str], env: dict[str, str], cwd: Path) -> Run:
    proc = subprocess.run([sys.executable, "-m", "xeoncluster.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=300)
    return Run(argv, proc.returncode, proc.stdout, proc.stderr)


def seed_image(endpoint: str) -> str:
    """An AMI the user already has (e.g. one they baked): run an instance, image it, terminate it."""
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    base = ec2.describe_images(Owners=["amazon"], Filters=[{"Name": "architecture", "Values": ["x86_64"]}],
                               MaxResults=5)["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=base, MinCount=1, MaxCount=1, InstanceType="c7i.2xlarge")
    instance_id = instance["Instances"][0]["InstanceId"]
    image = ec2.create_image(InstanceId=instance_id, Name="my-golden-image")["ImageId"]
    ec2.terminate_instances(InstanceIds=[instance_id])
    return str(image)


def created_by_up(endpoint: str) -> dict[str, Any]:
    import boto3

    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=endpoint,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    tag = [{"Name": "tag:xeoncluster:cluster", "Values": ["xc"]}]
    return {"instances": [i["InstanceId"] for r in ec2.describe_instances(Filters=tag)["Reservations"]
                          for i in r["Instances"]],
            "security_groups": [g["GroupId"] for g in ec2.describe_security_groups(Filters=tag)["SecurityGroups"]],
            "key_pairs": [k["KeyName"] for k in ec2.describe_key_pairs(Filters=tag)["KeyPairs"]]}


def run_demo(workdir: Path, full: bool = True) -> list[Run]:
    """Steps 1-3 above (only step 1 unless `full`). The server's own chatter is swallowed: moto
    logs every request and a traceback for the Pricing API, which it does not implement."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    with contextlib.redirect_stdout(io.StringIO()):
        server.start()
        try:
            host, port = server.get_host_and_port()
            endpoint = f"http://{host}:{port}"
            env = environment(endpoint, workdir)
            (workdir / "cluster.yaml").write_text(CONFIG)
            runs = [xeoncluster(["plan", "--nodes", "4"], env, workdir)]
            if not full:
                return runs
            runs.append(xeoncluster(["up", "--nodes", "4"], env, workdir))
            left = created_by_up(endpoint)
            if any(left.values()):
                raise SystemExit(f"`up` created resources although it failed: {left}")
            image = seed_image(endpoint)
            runs.append(xeoncluster(["plan", "--nodes", "4", "--image", image], env, workdir))
            return runs
        finally:
            server.stop()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="xc-moto-demo-") as tmp:
        runs = run_demo(Path(tmp))
    for run in runs:
        print(run.show())
    expected = [0, 2, 0]
    ok = [r.code for r in runs] == expected
    print(f"exit codes {[r.code for r in runs]} (expected {expected}): {'ok' if ok else 'UNEXPECTED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
