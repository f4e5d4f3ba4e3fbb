"""IMDSv2 at 169.254.169.254 for the containers: a session token first (PUT), then metadata
with that token; the instance is the one whose address the request comes from."""
from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_TTL = 21600


@dataclass
class Tokens:
    issued: dict[str, tuple[str, float]] = field(default_factory=dict)  # token -> (address, expiry)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def issue(self, address: str, ttl: int) -> str:
        token = secrets.token_urlsafe(32)
        with self.lock:
            self.issued[token] = (address, time.monotonic() + ttl)
        return token

    def valid(self, token: str | None, address: str) -> bool:
        with self.lock:
            entry = self.issued.get(token or "")
        return entry is not None and entry[0] == address and entry[1] > time.monotonic()


Credentials = Callable[[Any], Any]  # fleet Node -> moto_iam.SessionCredentials or None (no role)


def metadata(node: Any, credentials: Credentials = lambda node: None) -> dict[str, str | None]:
    """The metadata paths the stand-in answers, for one fleet Node."""
    launch = node.launch
    instance = launch.instance
    return {
        "instance-id": launch.instance_id,
        "ami-id": launch.image_id,
        "instance-type": instance.instance_type,
        "local-ipv4": launch.private_ip,
        "public-ipv4": launch.public_ip,
        "hostname": "ip-" + launch.private_ip.replace(".", "-") + ".ec2.internal",
        "local-hostname": "ip-" + launch.private_ip.replace(".", "-") + ".ec2.internal",
        "placement/availability-zone": instance._placement.zone,
        "instance-life-cycle": "spot" if instance.lifecycle == "spot" else "on-demand",
        "spot/instance-action": json.dumps(node.notice) if node.notice else None,
        "events/recommendations/rebalance": json.dumps(node.rebalance) if node.rebalance else None,
    } | _role(credentials(node))


def _role(session: Any) -> dict[str, str | None]:
    """The instance profile's role and its current session credentials (IMDS renews them ahead of expiry)."""
    if session is None:
        return {}
    document = session.imds_document()
    profile = f"arn:aws:iam::123456789012:instance-profile/{session.role}"
    return {"iam/security-credentials": session.role,
            f"iam/security-credentials/{session.role}": json.dumps(document),
            "iam/info": json.dumps({"Code": "Success", "LastUpdated": document["LastUpdated"],
                                    "InstanceProfileArn": profile})}


def make_handler(find_node: Callable[[str], Any], tokens: Tokens,
                 credentials: Credentials = lambda node: None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "EC2ws"

        def do_PUT(self) -> None:
            if self.path != "/latest/api/token":
                return self._reply(404, "Not Found")
            try:
                ttl = int(self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", ""))
            except ValueError:
                return self._reply(400, "Bad Request")
            if not 1 <= ttl <= MAX_TTL:
                return self._reply(400, "Bad Request")
            token = tokens.issue(self.client_address[0], ttl)
            self._reply(200, token, {"X-aws-ec2-metadata-token-ttl-seconds": str(ttl)})

        def do_GET(self) -> None:
            address = self.client_address[0]
            if not tokens.valid(self.headers.get("X-aws-ec2-metadata-token"), address):
                return self._reply(401, "Unauthorized")
            node = find_node(address)
            prefix = "/latest/meta-data/"
            if node is None or not self.path.startswith("/latest/meta-data"):
                return self._reply(404, "Not Found")
            values = metadata(node, credentials)
            key = self.path[len(prefix):].rstrip("/") if self.path.startswith(prefix) else ""
            if key == "":
                listing = sorted({k.split("/")[0] + ("/" if "/" in k else "") for k, v in values.items() if v})
                return self._reply(200, "\n".join(listing))
            value = values.get(key)
            self._reply(200, value) if value is not None else self._reply(404, "Not Found")

        def _reply(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

    return Handler


def serve_imds(address: str, find_node: Callable[[str], Any],
               credentials: Credentials = lambda node: None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, 80), make_handler(find_node, Tokens(), credentials))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
