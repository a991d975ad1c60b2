"""The HTTP app: ``create_app(store=..., agents=..., temporal=...)`` returns a FastAPI (ASGI) app.

Mount it in a FastAPI app of your own or serve it with ``durable-agent serve``. It keeps no state
a replica would need: sessions are read from the store, runs are found on Temporal, and the
streams of a session share one follower per process (docs/design.md#http-api). Every refused
request answers ``{"error": {"type": <error class>, "message": ...}}`` with its status, and
stores nothing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from temporalio.service import RPCError

from ..activities.spec import AgentSpec
from ..durable.errors import (
    ApprovalNotPendingError,
    ApprovalPendingError,
    CompactError,
    EntryNotFoundError,
    PayloadTooLargeError,
    RunActiveError,
    RunNotAcceptingError,
    UnknownAgentError,
)
from ..durable.limits import PAYLOAD_LIMIT
from ..session.errors import (
    EntryConflictError,
    EntryTooLargeError,
    InvalidSessionIdError,
    SessionExistsError,
    SessionNotFoundError,
    StoreUnavailableError,
)
from ..session.store import Store
from ..workflows.mail_client import TemporalUnavailableError
from ..workflows.store_check import StoreMismatchError
from .hubs import Hubs
from .local_runs import LocalRuns
from .runs import STORE_UNAVAILABLE, RunFailure, RunNotFoundError, Runs, RunsUnavailableError
from .sse import KEEPALIVE
from .temporal_runs import UPDATE_WAIT, TemporalRuns
from .tenants import Tenants, load_keys

__all__ = ["ApiError", "Server", "create_app"]

logger = logging.getLogger("durable_agent.server")

STATIC = Path(__file__).parent / "static"

STATUS: list[tuple[type[BaseException], int]] = [
    (InvalidSessionIdError, 400),
    (SessionNotFoundError, 404),
    (EntryNotFoundError, 404),
    (RunNotFoundError, 404),
    (RunActiveError, 409),
    (RunNotAcceptingError, 409),
    (ApprovalPendingError, 409),
    (ApprovalNotPendingError, 409),
    (SessionExistsError, 409),
    (EntryConflictError, 409),
    (PayloadTooLargeError, 413),
    (EntryTooLargeError, 413),
    (UnknownAgentError, 422),
    (StoreUnavailableError, 503),
    (StoreMismatchError, 503),  # the deployment's mistake: runs cannot start until it is fixed
    (RunsUnavailableError, 503),
    (TemporalUnavailableError, 503),  # no worker took a decision or a message in time
    (CompactError, 502),  # the summarizer (the model) failed; nothing was stored
    (ValueError, 400),
]
"""Each library error a route may raise, and its HTTP status (first match wins)."""
EXTRAS = ("run_id", "decision_id", "message_id")
"""What an error's body carries beside its type and message, when the error has it."""


HTTP_TYPES = {400: "MalformedJSONError", 404: "NotFoundError", 405: "MethodNotAllowedError"}
"""The error type of FastAPI's and the router's own refusals, by status (FastAPI's 400: a body
it could not parse, such as JSON nested deeper than the parser goes)."""


class ApiError(Exception):
    """An error the app itself raises: a status and a type name."""

    def __init__(self, status: int, type_: str, message: str) -> None:
        super().__init__(message)
        self.status, self.type = status, type_


def error(status: int, type_: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": {"type": type_, "message": message, **extra}}, status)


@dataclass
class Server:
    """What every route reads from ``app.state.server``."""

    store: Store
    runs: Runs | None
    hubs: Hubs
    tenants: Tenants
    keepalive: float = KEEPALIVE
    body_limit: int = PAYLOAD_LIMIT


class BodyLimit:
    """Refuses a request body over ``limit`` bytes with 413 before a route sees any of it: by
    its declared length (the HTTP server reads no more than that), else read whole first (a
    chunked body: the route would take a cut-off one for a malformed one)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.limit:
                await self._refuse(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        read = await self._read(receive)
        if read is None:
            await self._refuse(scope, receive, send)
            return

        async def replayed() -> Message:
            return read.popleft() if read else await receive()

        await self.app(scope, replayed, send)

    async def _read(self, receive: Receive) -> deque[Message] | None:
        """The body's messages up to its end or the client's leaving; ``None`` over the limit."""
        messages: deque[Message] = deque()
        seen = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                return messages
            seen += len(message.get("body", b""))
            if seen > self.limit:
                return None
            if not message.get("more_body", False):
                return messages

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"the request body is over the {self.limit}-byte payload limit"
        await error(413, "PayloadTooLargeError", message)(scope, receive, send)


PAGE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; img-src 'self' data:; "
        b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
]
"""What the chat page's files answer with: the page runs its own files only and no other
site frames it, to lay its own bait over the approve button."""


class PageHeaders:
    """Adds :data:`PAGE_HEADERS` to every answer of the chat page's files."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", ()), *PAGE_HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)


def _loopback(host: str) -> bool:
    """Whether ``host`` (a Host header's or an origin's, with its port) names this machine's
    loopback: ``localhost`` and its subdomains, 127.0.0.0/8, ``[::1]``."""
    name = host.rpartition("]")[0].lstrip("[") if host.startswith("[") else host.split(":")[0]
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LoopbackOnly:
    """A server without keys answers only requests to its loopback names that no page of
    another site sent: any web page the user opens could otherwise drive it through the
    browser, by a form (which needs no CORS) or under its own name rebound to 127.0.0.1 (DNS
    rebinding: the server's origin to the browser). A page served from loopback is served by
    a process that could reach the server anyway (docs/design.md#http-api)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (why := self._refused(dict(scope["headers"]))):
            message = f"a server without API keys {why}; serve it with keys to be reached so"
            await error(403, "ForbiddenError", message)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _refused(headers: dict[bytes, bytes]) -> str | None:
        """Why a request is refused (``None``: it is not). No Host (HTTP/1.0) is no browser's."""
        if not _loopback(headers.get(b"host", b"localhost").decode("latin-1")):
            return "answers only requests to its loopback names (localhost, 127.0.0.1, [::1])"
        origin = headers.get(b"origin")
        if origin is None:
            return None
        shown = origin.decode("latin-1")
        _, sep, host = shown.partition("://")  # "null": a sandboxed page's, a file's
        if sep and _loopback(host):
            return None
        return f"takes no request from a page of another site (Origin: {shown[:100]})"


def _body_not_json(request: Request, problems: Sequence[Any]) -> bool:
    """Whether a body was refused for coming as another type than JSON (FastAPI hands a route
    such a body as bytes, unparsed: ``curl -d`` sends a form's type)."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json")):
        return False
    return any(
        tuple(p.get("loc", ())) == ("body",) and p.get("type") != "missing" for p in problems
    )


def _allowed(routes: Sequence[BaseRoute], request: Request) -> str:
    """The methods of ``routes`` for the request's path (``""``: a path they have not)."""
    methods: set[str] = set()
    for route in routes:
        if isinstance(route, Route) and route.matches(request.scope)[0] is not Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


UNAVAILABLE = {
    StoreUnavailableError: STORE_UNAVAILABLE,
    RPCError: "Temporal did not answer; try again in a moment",
}
"""What a 503 of the store or of Temporal tells the client (not the path, host or port)."""


def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    """503 with a message that names nothing of the server; its log keeps the detail (one line:
    an outage is an ordinary event, not a bug worth a traceback)."""
    kind = StoreUnavailableError if isinstance(exc, StoreUnavailableError) else RPCError
    detail = " ".join(str(exc).split())
    logger.warning("%s %s: 503: %s: %s", request.method, request.url.path, kind.__name__, detail)
    type_ = "StoreUnavailableError" if kind is StoreUnavailableError else "TemporalUnavailableError"
    return error(503, type_, UNAVAILABLE[kind])


def _handlers(app: FastAPI, routes: Sequence[BaseRoute]) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error(exc.status, exc.type, str(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        """A path or a method the API has not (the router's and the chat page's 404, 405), a
        body FastAPI could not parse (400)."""
        response = error(exc.status_code, HTTP_TYPES.get(exc.status_code, "HTTPError"), exc.detail)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405 and (allowed := _allowed(routes, request)):
            response.headers["allow"] = allowed  # the router names one route's (of a path's)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = exc.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error(400, "MalformedJSONError", "the request body is not valid JSON")
        if _body_not_json(request, problems):
            message = "the request body is JSON: send it with Content-Type: application/json"
            return error(415, "UnsupportedMediaTypeError", message)
        shown = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ()))}: {p.get('msg')}" for p in problems
        )
        return error(422, "ValidationError", shown)

    async def library(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, StoreUnavailableError | RPCError):
            return _unavailable(request, exc)
        if isinstance(exc, TemporalUnavailableError):  # the operator's to know: start a worker
            logger.warning("%s %s: 503: %s", request.method, request.url.path, exc)
        if isinstance(exc, StoreMismatchError):  # its operator's to fix: a line, not a bug's
            logger.error("%s %s: 503: %s", request.method, request.url.path, exc)
        for kind, status in STATUS:
            if isinstance(exc, kind):
                extra = {k: getattr(exc, k) for k in EXTRAS if hasattr(exc, k)}
                # a failed summary quotes the model's error: masked as a failed run's is
                shown = RunFailure.of(exc).message if isinstance(exc, CompactError) else str(exc)
                return error(status, type(exc).__name__, shown, **extra)
        raise exc  # a kind the handler is registered for is in STATUS

    # by class, not for Exception: that handler would answer and still raise to the server
    for kind in [*(k for k, _ in STATUS), RPCError]:
        app.add_exception_handler(kind, library)


def _runs(
    store: Store,
    hubs: Hubs,
    agents: Mapping[str, AgentSpec] | Sequence[str] | None,
    temporal: Any,
    task_queue: str,
    update_wait: float,
) -> Runs | None:
    """Where the server's runs go: Temporal's workers, this process, or nowhere (503)."""
    if temporal is not None:
        return TemporalRuns(temporal, task_queue, store, hubs, list(agents or ()), update_wait)
    if agents:
        if not isinstance(agents, Mapping):
            raise TypeError("agents in process: a mapping of name -> AgentSpec")
        return LocalRuns(store, agents, hubs)
    return None


def create_app(
    *,
    store: Store,
    agents: Mapping[str, AgentSpec] | Sequence[str] | None = None,
    temporal: Any = None,
    task_queue: str = "durable-agent",
    keys: Mapping[str, Any] | str | Path | None = None,
    keepalive: float = KEEPALIVE,
    update_wait: float = UPDATE_WAIT,
) -> FastAPI:
    """The ASGI app (docs/design.md#http-api).

    ``agents`` (name -> ``AgentSpec``) runs agents in this process; ``temporal`` (a connected
    ``temporalio`` client) starts runs on the workers of ``task_queue``, ``agents`` then naming
    the agents they serve (the default when there is one); with neither, the run routes answer
    503. ``keys``: a mapping or a JSON file of API keys (``DURABLE_AGENT_KEYS`` if ``None``).
    ``update_wait``: on Temporal, the seconds a decision or a message waits for a worker to take
    it before its request answers 503 ``TemporalUnavailableError`` (docs/design.md#http-api).
    """
    from .agui import router as agui_router
    from .routes_people import router as people_router
    from .routes_runs import router as runs_router
    from .routes_sessions import router as sessions_router

    hubs = Hubs(store, None)
    hubs.runs = runs = _runs(store, hubs, agents, temporal, task_queue, update_wait)
    server = Server(store, runs, hubs, Tenants(load_keys(keys)), keepalive)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await hubs.aclose()
        if isinstance(runs, LocalRuns | TemporalRuns):
            await runs.aclose()

    # no trailing-slash redirects (the API has none; the page's files answer as asked); the
    # operation IDs, a generated client's method names, are the route functions' names
    app = FastAPI(
        title="durable-agent",
        lifespan=lifespan,
        redirect_slashes=False,
        generate_unique_id_function=lambda route: route.name,
    )
    app.state.server = server
    routers = [sessions_router, runs_router, people_router, agui_router]
    _handlers(app, [route for router in routers for route in router.routes])
    for router in routers:
        app.include_router(router)
    # the chat page answers what no route does: mounted at "/", it would take every path and
    # answer a method a route has not (GET on a POST route) as a file it has not
    app.router.default = PageHeaders(StaticFiles(directory=STATIC, html=True))
    app.add_middleware(BodyLimit, limit=server.body_limit)
    if server.tenants.open:  # outermost: a refused request's body is never read
        app.add_middleware(LoopbackOnly)
    return app
