"""``durable-agent serve``: the HTTP API and the chat page (docs/design.md#http-api) on uvicorn,
its runs started on the workers of a task queue; and :func:`start_http`, which ``dev`` serves its
chat page with too.

``serve`` logs as a worker does (:mod:`durable_agent.workflows.worker_logs`: time, level and
logger on every line, as text or JSON, no key of the process), uvicorn's own loggers included:
given no logging config of its own, uvicorn's records reach the process's handler, so one log
pipeline takes both processes' lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated

import typer
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from ..workflows.store_check import poller_identities
from ..workflows.worker_logs import configure_worker_logging, forward_core_log
from . import render
from .config import (
    AddressOpt,
    CommandError,
    LogFormatOpt,
    NamespaceOpt,
    ProfileOpt,
    QueueOpt,
    StoreOpt,
    UsageError,
    connect,
    display_store,
    open_store,
    queue_for,
    resolve_store_spec,
)
from .processes import ProcessError, stop_on_signals
from .render import flags_from, run_command

if TYPE_CHECKING:  # the server extra's, imported when serving
    import uvicorn
    from starlette.types import ASGIApp

__all__ = ["check_namespace", "listen", "serve", "start_http"]

logger = logging.getLogger("durable_agent.serve")
"""The command's own lines: what it serves, and a failure that stops it."""


async def start_http(
    store_spec: str,
    client: Client,
    task_queue: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    keys: str | None = None,
    agents: list[str] | None = None,
    limit: int | None = None,
) -> tuple[str, asyncio.Task[None]]:
    """The HTTP API and chat page (docs/design.md#http-api) on uvicorn in this process: its
    URL and the serving task (cancelling it shuts the server down, its app's shutdown too);
    over ``limit`` connections or requests, uvicorn answers 503."""
    from sse_starlette.sse import AppStatus

    from ..server import create_app

    sockets = listen(host, port)
    store = (opened := open_store(store_spec)).store  # closed when the server stops
    app = create_app(store=store, temporal=client, task_queue=task_queue, keys=keys, agents=agents)
    server = _server(app, host, port, limit)
    serving = asyncio.create_task(server.serve(sockets))

    async def run() -> None:
        try:
            await asyncio.shield(serving)
        except asyncio.CancelledError:
            server.should_exit = True
            # the streams end now: sse-starlette learns of a stop from the server holding
            # SIGTERM, which none does here, and a stream uvicorn cancels after its grace is a
            # traceback
            AppStatus.should_exit = True
            try:
                await serving
            finally:
                AppStatus.should_exit = False  # the process's next server streams again
            raise
        finally:
            await opened.close()

    task, url = asyncio.create_task(run()), f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    while not server.started:
        if serving.done():
            serving.result()
            raise ProcessError(f"the HTTP server did not start on {url}")
        await asyncio.sleep(0.05)
    return url, task


def _server(app: ASGIApp, host: str, port: int, limit: int | None) -> uvicorn.Server:
    """uvicorn as ``serve`` and ``dev`` run it: its records to the process's handler (no
    log_config: see the module docstring), requests in flight given :data:`GRACE` to finish,
    and none of its signal handlers: the command owns SIGTERM and SIGINT (uvicorn's raised the
    signal again once stopped, exit 143, and took no second one as "now")."""
    import uvicorn

    config = uvicorn.Config(
        app,
        host,
        port,
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=GRACE,
        limit_concurrency=limit,
    )

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


def listen(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host:port`` as uvicorn binds them (asyncio's way: each address the
    host resolves to), for uvicorn to serve; one that cannot be bound (a port in use, a host that
    is no address here) is a :class:`ProcessError` naming it. uvicorn logged it in its own
    words and exited 3, this CLI's code for a session that does not exist."""
    bound: list[socket.socket] = []
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        for family, kind, proto, _, address in dict.fromkeys(found):
            bound.append(sock := socket.socket(family, kind, proto))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio: the IPv4 address is bound on its own
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise ProcessError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return bound


LimitOpt = Annotated[
    int | None,
    typer.Option(
        "--limit-concurrency",
        min=1,
        envvar="DURABLE_AGENT_LIMIT_CONCURRENCY",
        help="Answer 503 at once while this many connections (open streams count) or requests "
        "are open (default: no limit; put a proxy in front for slow clients).",
        show_default=False,
    ),
]

OnlyAgentOpt = Annotated[
    str | None,
    typer.Option(
        "--agent",
        help="The one agent runs use (a request naming another is refused; default: each "
        "request names its agent).",
        show_default=False,
    ),
]


def serve(
    host: Annotated[str, typer.Option(help="Bind address (--keys beyond loopback).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="HTTP port.")] = 8000,
    keys: Annotated[
        str | None, typer.Option("--keys", help="API keys file (default: $DURABLE_AGENT_KEYS).")
    ] = None,
    agent: OnlyAgentOpt = None,
    limit: LimitOpt = None,
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    address: AddressOpt = None,
    namespace: NamespaceOpt = None,
    profile: ProfileOpt = None,
    log_format: LogFormatOpt = "text",
) -> None:
    """Serve the HTTP API and the chat page; runs go to the workers of the task queue."""
    flags = flags_from(address, namespace, profile, False)
    configure_worker_logging(log_format)
    render.FAILURE_LOG = logger

    async def main() -> int:
        from ..server.tenants import load_keys

        _exit_on_signals("stopped before it was ready")  # a slow Temporal may hold the start
        forward_core_log("ERROR")  # a request's retried calls: its 503 is the line to read
        try:
            table = load_keys(keys)
        except ValueError as exc:  # the file's problem, in words that never show a key
            raise UsageError(str(exc)) from None
        if table is None and host not in ("127.0.0.1", "localhost", "::1"):
            raise ProcessError("without --keys the server binds loopback only (use --keys FILE)")
        if table is None:
            logger.info("no API keys: serving loopback only, every caller is one tenant")
        if agent is None:
            logger.info('no --agent: each run request names its agent ("agent")')
        client = await connect(flags)
        await check_namespace(client)
        spec, queue = resolve_store_spec(store), queue_for(task_queue, flags)
        await warn_if_unserved(client, queue)
        agents = [agent] if agent else None
        url, task = await start_http(
            spec, client, queue, host=host, port=port, keys=keys, agents=agents, limit=limit
        )
        stop = stop_on_signals(*STOP_SIGNALS)
        logger.info(
            "serve %d ready on %s: task queue %s, store %s, Temporal %s (namespace %s)",
            os.getpid(),
            url,
            queue,
            display_store(spec),
            client.service_client.config.target_host,
            client.namespace,
        )
        await until_stopped(task, stop)
        return 0

    raise typer.Exit(run_command(main))


GRACE = 5
"""Seconds a stopping server gives the requests in flight to be answered (its streams end at
once): under the 10 s Docker and Compose give a container between SIGTERM and SIGKILL."""

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


async def until_stopped(serving: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Serve until SIGTERM or SIGINT, then stop as a deploy expects: no new connection, open
    streams ended, requests in flight answered (for up to :data:`GRACE` seconds), the store
    closed, and the command exits 0; a second signal ends it there and then (128 + signal)."""
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not stop.is_set():  # the server ended by itself: its failure is the command's
        stopping.cancel()
        return await serving

    _exit_on_signals("stopped at once (a second signal)")
    logger.info("serve %d stopping: requests in flight have %g s to finish", os.getpid(), GRACE)
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving


def _exit_on_signals(why: str) -> None:
    """From now on SIGTERM or SIGINT ends the process at once (exit 128 + the signal), saying
    ``why``: by an exit, not the signal's default action, which a container's PID 1 lacks (it
    would ignore a ``docker stop`` until the SIGKILL)."""

    def now(sig: int) -> None:
        logger.info("serve %d %s", os.getpid(), why)
        os._exit(128 + sig)

    for sig in STOP_SIGNALS:
        asyncio.get_running_loop().add_signal_handler(sig, now, sig)


async def check_namespace(client: Client) -> None:
    """Refuse to serve a namespace the server has not: every run start would answer 503 "try
    again in a moment", which no retry cures (a worker refuses to start for the same mistake).
    A key that may not describe namespaces serves anyway, with a warning: the check is ours, not
    something the API needs (the library's ``connect`` does not make it)."""
    try:
        await client.workflow_service.describe_namespace(
            DescribeNamespaceRequest(namespace=client.namespace)
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            raise CommandError(
                f"namespace {client.namespace!r} does not exist on this Temporal server "
                "(check --namespace, TEMPORAL_NAMESPACE or the profile)"
            ) from None
        if exc.status != RPCStatusCode.PERMISSION_DENIED:
            raise
        logger.warning(
            "cannot check that namespace %r exists (%s); serving it anyway", client.namespace, exc
        )


async def warn_if_unserved(client: Client, queue: str) -> None:
    """Say once at start when no worker polls the task queue (a mistyped ``--task-queue``, a
    worker not started): every run would wait with no sign of why, as ``run`` warns too."""
    try:
        if await poller_identities(client, queue):
            return
    except RPCError:  # Temporal's own outage: each request's 503 says it
        return
    logger.warning("no worker polls task queue %r: runs started now wait for one", queue)
