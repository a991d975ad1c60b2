"""A local HTTP server that replays recorded provider responses to the real SDK clients.

The provider adapters are tested through the official ``openai`` and ``anthropic`` SDKs over real
sockets, so what is exercised is the SDKs' own HTTP, SSE and error handling, not a mock of it. The
server listens on ``127.0.0.1`` on an ephemeral port (in a thread, so it serves any event loop,
process-local Temporal workers included), answers each request with the next queued response, and
records every request it receives (method, path, headers, body) for the test to assert on.

A recorded response is a fixture file holding an HTTP response as the provider sent it: a status
line, header lines, a blank line, then the body byte for byte. A ``text/event-stream`` body is
sent with chunked transfer encoding, one chunk per SSE event, as the real APIs stream it; any other
body is sent with ``Content-Length``. Two pseudo-headers, stripped before sending, script
transport faults:

``x-replay-truncate: true``
    send the body, then close the connection without the terminating chunk (a stream cut
    mid-message: the client sees an incomplete chunked body);
``x-replay-hang: true``
    read the request and never answer (until the server closes), so the client's timeout fires.
``x-replay-echo: true``
    a hostile provider: the body is a template that echoes the credential the request carried
    (:data:`ECHOES` names the forms: the key without its ``sk-`` prefix, a slice from its
    middle, the ``Authorization`` header base64-encoded, the key URL-encoded, ...).

If no response is queued the server answers ``418`` with a JSON error naming the request, which
every adapter maps to a non-retryable error, so an unexpected extra call fails the test loudly.
"""

from __future__ import annotations

import base64
import json
import re
import sys
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["ECHOES", "FIXTURES", "ReceivedRequest", "RecordedResponse", "ReplayServer", "echo"]

FIXTURES = Path(__file__).parent / "fixtures"
"""Where the recorded responses live; :meth:`ReplayServer.enqueue` resolves names against it."""

_REPLAY_PREFIX = "x-replay-"

ECHOES: dict[str, Callable[[str, str], str]] = {
    "key": lambda key, auth: key,
    "key_unprefixed": lambda key, auth: re.sub(r"^[a-z]+[-_]", "", key),  # sk-, gsk_
    "key_middle": lambda key, auth: key[len(key) // 2 - 10 : len(key) // 2 + 10],
    "key_url": lambda key, auth: urllib.parse.quote(key, safe=""),
    "key_base64": lambda key, auth: base64.b64encode(key.encode()).decode(),
    "authorization_base64": lambda key, auth: base64.b64encode(auth.encode()).decode(),
    "basic_auth_base64": lambda key, auth: base64.b64encode(f"api:{key}".encode()).decode(),
}
"""What an echoing response's ``{{name}}`` placeholders become, from the request's key and its
``Authorization`` header value (``Bearer <key>``; for ``x-api-key`` clients, that header's value).
"""


def echo(template: bytes, headers: dict[str, str]) -> bytes:
    """``template`` with every ``{{name}}`` of :data:`ECHOES` filled from ``headers``."""
    auth = headers.get("authorization") or headers.get("x-api-key", "")
    key = auth.removeprefix("Bearer ")
    text = template.decode("utf-8")
    for name, form in ECHOES.items():
        text = text.replace("{{" + name + "}}", form(key, auth))
    return text.encode("utf-8")


@dataclass(frozen=True)
class RecordedResponse:
    """One recorded HTTP response, and the transport fault (if any) to inject while sending it."""

    status: int
    reason: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    truncate: bool = False
    hang: bool = False
    echo: bool = False

    @classmethod
    def parse(cls, raw: bytes) -> RecordedResponse:
        """Parse ``raw``: status line, headers, a blank line, then the body verbatim."""
        # Tolerate a CRLF checkout of the fixture: the head ends at the first blank line either way.
        match = re.search(rb"\r?\n\r?\n", raw)
        if match is None:
            raise ValueError("a recorded response needs a blank line after its headers")
        head, body = raw[: match.start()], raw[match.end() :]
        lines = head.decode("utf-8").splitlines()
        version, status, *reason = lines[0].split(" ", 2)
        if not version.startswith("HTTP/"):
            raise ValueError(f"not an HTTP status line: {lines[0]!r}")
        headers: list[tuple[str, str]] = []
        flags: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError(f"not a header line: {line!r}")
            name, value = name.strip().lower(), value.strip()
            if name.startswith(_REPLAY_PREFIX):
                flags[name.removeprefix(_REPLAY_PREFIX)] = value
            else:
                headers.append((name, value))
        unknown = set(flags) - {"truncate", "hang", "echo"}
        if unknown:
            raise ValueError(f"unknown replay directives: {sorted(unknown)}")
        return cls(
            status=int(status),
            reason=reason[0] if reason else "",
            headers=tuple(headers),
            body=body,
            truncate=flags.get("truncate") == "true",
            hang=flags.get("hang") == "true",
            echo=flags.get("echo") == "true",
        )

    @classmethod
    def load(cls, path: Path) -> RecordedResponse:
        return cls.parse(path.read_bytes())

    @classmethod
    def json(
        cls,
        status: int,
        payload: Any,
        *,
        headers: dict[str, str] | None = None,
        echo: bool = False,
    ) -> RecordedResponse:
        """A JSON response built in code (for one-off errors that need no fixture file);
        ``echo`` makes it a hostile one (``x-replay-echo``)."""
        extra = tuple((k.lower(), v) for k, v in (headers or {}).items())
        return cls(
            status=status,
            reason="",
            headers=(("content-type", "application/json"), *extra),
            body=json.dumps(payload).encode(),
            echo=echo,
        )

    @property
    def is_event_stream(self) -> bool:
        return any(k == "content-type" and "text/event-stream" in v for k, v in self.headers)

    def chunks(self) -> list[bytes]:
        """The body split as a server streams it: one chunk per SSE event (blank-line separated)."""
        if not self.is_event_stream:
            return [self.body] if self.body else []
        pieces = self.body.split(b"\n\n")
        out = [p + b"\n\n" for p in pieces[:-1]]
        if pieces[-1]:
            out.append(pieces[-1])
        return out


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the server received it; header names are lowercased."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class _State:
    queue: deque[RecordedResponse] = field(default_factory=deque)
    requests: list[ReceivedRequest] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closing: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet: pytest shows the assertions, not the access log."""

    def do_GET(self) -> None:
        self._replay()

    def do_POST(self) -> None:
        self._replay()

    def _replay(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        state = self.server.state
        request = ReceivedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        # Recorded before answering, so once the client has a response the request is visible.
        with state.lock:
            state.requests.append(request)
            response = state.queue.popleft() if state.queue else None
        if response is None:
            response = RecordedResponse.json(
                418,
                {
                    "type": "error",
                    "error": {
                        "type": "replay_error",
                        "message": f"replay server: no response queued for {self.command} "
                        f"{self.path}",
                    },
                },
            )
        if response.hang:
            state.closing.wait()
            self.close_connection = True
            return
        if response.echo:
            response = replace(response, body=echo(response.body, request.headers))
        self._send(response)

    def _send(self, response: RecordedResponse) -> None:
        self.send_response_only(response.status, response.reason or None)
        for name, value in response.headers:
            if name not in {"content-length", "transfer-encoding", "connection"}:
                self.send_header(name, value)
        if response.is_event_stream:
            self.send_header("transfer-encoding", "chunked")
        else:
            self.send_header("content-length", str(len(response.body)))
        if response.truncate:
            self.send_header("connection", "close")
        self.end_headers()
        if response.is_event_stream:
            for chunk in response.chunks():
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            if not response.truncate:
                self.wfile.write(b"0\r\n\r\n")
        else:
            body = response.body[: len(response.body) // 2] if response.truncate else response.body
            self.wfile.write(body)
        self.wfile.flush()
        if response.truncate:
            self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    state: _State

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Keep handler failures for the test to see; a client hanging up is not one (clients
        drop a connection they gave up on, mid-body or between keep-alive requests)."""
        error = sys.exc_info()[1]
        if error is not None and not isinstance(error, ConnectionError):
            with self.state.lock:
                self.state.errors.append(error)


class ReplayServer:
    """Serve queued recorded responses in order on ``127.0.0.1``; record every request.

    Use as a context manager (or :meth:`start` / :meth:`close`). ``url`` is the base URL to give an
    SDK (``url + "/v1"`` for OpenAI, ``url`` for Anthropic).
    """

    def __init__(self, fixtures: Path = FIXTURES) -> None:
        self._fixtures = fixtures
        self._state = _State()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ReplayServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.state = self._state
        self._server = server
        # A short poll interval only bounds how long close() waits for the loop to notice.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.02,), name="replay-server", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving; hung requests are released and their connections dropped."""
        self._state.closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> ReplayServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("replay server not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def enqueue(self, *responses: RecordedResponse | str | Path) -> None:
        """Queue responses, served in order; a ``str`` names a file under the fixtures directory."""
        loaded = [
            r
            if isinstance(r, RecordedResponse)
            else RecordedResponse.load(r if isinstance(r, Path) else self._fixtures / r)
            for r in responses
        ]
        with self._state.lock:
            self._state.queue.extend(loaded)

    @property
    def requests(self) -> list[ReceivedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def errors(self) -> list[BaseException]:
        """Exceptions raised while handling requests (client disconnects excluded)."""
        with self._state.lock:
            return list(self._state.errors)

    @property
    def pending(self) -> int:
        """Responses queued but not yet served."""
        with self._state.lock:
            return len(self._state.queue)
