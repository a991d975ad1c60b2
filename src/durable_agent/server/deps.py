"""What every ``/v1`` route depends on: the server's parts and the caller's tenant."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired, cast

from fastapi import Depends, Path, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from typing_extensions import TypedDict

from ..session.codec import entry_to_wire
from ..session.entries import Entry
from ..session.ids import MAX_SESSION_ID_LENGTH
from ..session.store import RetentionStore
from .app import ApiError, Server
from .runs import Runs, RunsUnavailableError
from .tenants import Tenant

__all__ = [
    "REFUSALS",
    "SESSION_ID",
    "SessionId",
    "Caller",
    "ErrorBody",
    "SeqEntry",
    "ServerDep",
    "WireEntry",
    "answers",
    "caller",
    "refusals",
    "retention",
    "runs",
    "server",
    "wire",
]


SESSION_ID: dict[str, Any] = {
    "pattern": rf"^[A-Za-z0-9\-_.:@]{{1,{MAX_SESSION_ID_LENGTH}}}$",
    "maxLength": MAX_SESSION_ID_LENGTH,
}
"""The session-ID rule (``session.ids``) as the document shows it; only shown: the server
checks it itself, a break answering 400 ``InvalidSessionIdError`` (not 422). ``.`` and ``..``
are refused in words, not in the pattern: a lookahead is lost on generators whose regex engines
have none."""

SessionId = Annotated[
    str,
    Path(
        description="under the caller's key's prefix; not `.` or `..`",
        json_schema_extra=SESSION_ID,
    ),
]


class ErrorDetail(TypedDict):
    type: str
    message: str
    run_id: NotRequired[str | None]
    decision_id: NotRequired[str | None]
    message_id: NotRequired[str | None]


class ErrorBody(TypedDict):
    """Every refusal's body (``app.error``): the error's class name, e.g.
    ``SessionNotFoundError``, its message, and the ID it concerns when it has one."""

    error: ErrorDetail


class WireEntry(TypedDict):
    """An entry as the store writes it (docs/design.md#sessions-and-entries): its fields by
    ``type``; a custom entry carries its application's fields beside them."""

    type: Literal["message", "compaction", "custom"]
    id: str
    parent_id: NotRequired[str]
    created_at: str
    meta: NotRequired[bool]
    synthetic: NotRequired[bool]
    message: NotRequired[dict[str, Any]]
    summary: NotRequired[str]
    first_kept_id: NotRequired[str | None]
    tokens_before: NotRequired[int]
    kind: NotRequired[str]


def wire(entry: Entry) -> WireEntry:
    return cast(WireEntry, entry_to_wire(entry))


class SeqEntry(TypedDict):
    seq: int
    """The entry's 1-based place in the session's append order (the stream's event ID)."""
    entry: WireEntry


WHY = {
    400: "a bad session ID, malformed JSON, a body the route cannot use",
    401: "no API key, or one the server does not know",
    403: "a server without keys refusing a request not to its loopback names",
    404: "no such session (another tenant's too), entry or run; a path the API has not",
    409: "a run goes, nothing pending, no run takes the message, the ID is taken",
    413: "the request body, or what it would store, is over the payload limit",
    415: "a body sent as another type than application/json",
    422: "a body or a query parameter that breaks its schema, an unknown agent",
    501: "the store cannot list or delete sessions",
    502: "the model failed to summarize; nothing was stored",
    503: "no runner, the store or Temporal down, no worker took a decision or message",
}
"""What each refusal status means (docs/design.md#http-api)."""


def refusals(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The document's entries for refusals: each answers :class:`ErrorBody`."""
    return {s: {"model": ErrorBody, "description": WHY[s]} for s in statuses}


REFUSALS = refusals(400, 401, 403, 404, 422, 503)
"""What any ``/v1`` route may answer (declaring 422 keeps FastAPI from claiming its own
``{"detail": [...]}`` shape, which this server never answers)."""


def answers(
    status: int, model: Any, *refused: int, also: dict[int, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A route decorator's arguments: its success ``status`` and body ``model`` as the OpenAPI
    document declares them, the refusals it adds to :data:`REFUSALS` and ``also`` its other
    answers. The route returns plain JSON: ``response_model=None`` keeps FastAPI from passing
    it through ``model``."""
    ok = {"model": model} if model is not None else {}
    return {
        "status_code": status,
        "response_model": None,
        "responses": {status: ok, **(also or {}), **refusals(*refused)},
    }


def server(request: Request) -> Server:
    value = request.app.state.server
    assert isinstance(value, Server)
    return value


ServerDep = Annotated[Server, Depends(server)]


BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="an API key")
"""Declares the key in the OpenAPI document, so generated clients send it; :meth:`caller`
reads the header itself (a server without keys takes requests without one)."""


def caller(
    request: Request,
    srv: ServerDep,
    _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)],
) -> Tenant:
    """The caller's tenant, else 401 (no key, or one the server does not know)."""
    tenant = srv.tenants.caller(request.headers.get("authorization"))
    if tenant is None:
        raise ApiError(
            401, "UnauthorizedError", "send a known API key: Authorization: Bearer <key>"
        )
    return tenant


Caller = Annotated[Tenant, Depends(caller)]


def retention(srv: Server) -> RetentionStore:
    if not isinstance(srv.store, RetentionStore):
        raise ApiError(501, "NotSupportedError", "this store cannot list or delete sessions")
    return srv.store


def runs(srv: Server) -> Runs:
    if srv.runs is None:
        raise RunsUnavailableError("this server runs nothing: give it agents or a Temporal client")
    return srv.runs
