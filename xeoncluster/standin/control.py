"""The daemon's control endpoint on the namespace's loopback (status, interrupt, shutdown), and
the client that the host-side commands use to reach it."""
from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Handler = Callable[[dict[str, Any]], Any]


def serve_control(port: int, routes: dict[str, Handler]) -> ThreadingHTTPServer:
    class Control(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            route = routes.get(self.path.strip("/"))
            if route is None:
                return self._reply(404, {"error": f"no route {self.path}"})
            try:
                self._reply(200, route(body))
            except (KeyError, ValueError) as exc:
                self._reply(400, {"error": str(exc).strip("'\"")})

        def _reply(self, status: int, payload: Any) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Control)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


class ControlError(Exception):
    pass


def call(port: int, route: str, body: dict[str, Any] | None = None, timeout: float = 120.0) -> Any:
    """POST to the daemon; the caller must be in the stand-in's network namespace."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/{route}", data=json.dumps(body or {}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310 - loopback only
            return json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        raise ControlError(json.loads(exc.read() or b"{}").get("error", str(exc))) from None
