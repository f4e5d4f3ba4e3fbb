"""moto's server app behind the stand-in's IAM gate (xeoncluster/standin/iam_gate.py), on loopback, in this process.

It answers from the same in-process moto account as the `aws` fixture (moto's backends are global),
so the admin's plain boto3 clients (the `testing` key, intercepted in-process) and calls through
the server see the same resources. Calls signed by an IAM user's key or a role's session go through
the gate, as they do on the booted stand-in (xeoncluster/standin/daemon.py wraps moto the same way).
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_helpers import REGION

from xeoncluster.standin.iam_gate import IamGate
from xeoncluster.standin.iam_users import UserKeys, make_user
from xeoncluster.standin.moto_iam import caller
from xeoncluster.standin.moto_lookup import MotoLookup


@dataclass
class GatedServer:
    url: str
    gate: IamGate

    def client(self, service: str, keys: UserKeys | None = None, token: str | None = None) -> Any:
        """A client through the gate: as the admin without `keys`, else as that identity."""
        key_id, secret = (keys.access_key_id, keys.secret_access_key) if keys else ("testing", "testing")
        return boto3.client(service, region_name=REGION, endpoint_url=self.url, aws_access_key_id=key_id,
                            aws_secret_access_key=secret, aws_session_token=token)

    def user(self, name: str, policy: dict[str, Any], boundary: dict[str, Any] | None = None) -> UserKeys:
        """What `aws-standin.sh user` does: the admin makes the user with exactly this policy."""
        return make_user(self.client("iam"), name, policy, boundary)

    def denied(self) -> dict[str, int]:
        return dict(self.gate.denied)


@pytest.fixture
def gated(aws: Any) -> Iterator[GatedServer]:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    gate = IamGate(DomainDispatcherApplication(create_backend_app), caller, lambda region: MotoLookup(region))
    server = make_server("127.0.0.1", 0, gate, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="gated-moto", daemon=True)
    thread.start()
    try:
        yield GatedServer(f"http://127.0.0.1:{server.server_port}", gate)
    finally:
        with contextlib.suppress(Exception):
            server.shutdown()
        thread.join(timeout=10)
