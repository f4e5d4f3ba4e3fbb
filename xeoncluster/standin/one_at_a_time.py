"""moto's S3 backend is not thread-safe, yet werkzeug serves each connection in its own thread: two
calls at once on one bucket (the master's agent storing a run while the CLI lists or reads it) can see
each other half done. S3 calls therefore reach moto one at a time. Each body is read first, outside
the lock, so a slow upload holds up nobody. Other services pass as they come: some EC2 calls wait on
containers for seconds, and must not hold up the rest."""
from __future__ import annotations

import io
import threading
from collections.abc import Callable, Iterable
from typing import Any

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
S3_SCOPES = ("/s3/aws4_request", "%2Fs3%2Faws4_request")  # signed in a header, or presigned


class OneAtATime:
    def __init__(self, app: WsgiApp) -> None:
        self.app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        signed = environ.get("HTTP_AUTHORIZATION", "") + environ.get("QUERY_STRING", "")
        if not any(scope in signed for scope in S3_SCOPES):
            return self.app(environ, start_response)
        environ["wsgi.input"] = io.BytesIO(_body(environ))
        with self._lock:
            answer = self.app(environ, start_response)
            try:
                return [b"".join(answer)]
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()


def _body(environ: dict[str, Any]) -> bytes:
    stream = environ["wsgi.input"]
    length = environ.get("CONTENT_LENGTH")
    if length:
        return bytes(stream.read(int(length)))
    if environ.get("wsgi.input_terminated"):  # chunked: werkzeug ends the stream at the last chunk
        return bytes(stream.read())
    return b""
