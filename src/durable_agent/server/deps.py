"""What every ``/v1`` route depends on: the server's parts and the caller's tenant."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from ..session.store import RetentionStore
from .app import ApiError, Server
from .runs import Runs, RunsUnavailableError
from .tenants import Tenant

__all__ = ["Caller", "ServerDep", "caller", "retention", "runs", "server"]


def server(request: Request) -> Server:
    value = request.app.state.server
    assert isinstance(value, Server)
    return value


ServerDep = Annotated[Server, Depends(server)]


def caller(request: Request, srv: ServerDep) -> Tenant:
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
