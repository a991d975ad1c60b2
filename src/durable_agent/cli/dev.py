"""``durable-agent dev``: a Temporal dev server, its Web UI and one worker, until Ctrl-C; and the
dev server ``demo`` runs too.

The server is advertised in ``<data dir>/server.json`` while it runs, so ``run``, ``chat`` and
``state`` in another terminal find it without ``TEMPORAL_ADDRESS``. If the worker dies it is
restarted (that is what a deployment would do); if the server dies, ``dev`` stops. Fixed ports
are used when free and others picked otherwise, so a busy 7233 never stops the demo.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Annotated

import typer
from rich.console import Console
from temporalio.client import Client

from ..workflows.config import ServerInfo, data_dir, remove_server_info, write_server_info
from ..workflows.search import KIND_ATTRIBUTE, SEARCH_ATTRIBUTE
from .config import (
    DEFAULT_TASK_QUEUE,
    DEMO_APP,
    ENV_APP,
    ENV_TASK_QUEUE,
    LogFormatOpt,
    QueueOpt,
    StoreOpt,
    TemporalFlags,
    connect,
    display_store,
    resolve_store_spec,
)
from .processes import (
    ManagedProcess,
    ProcessError,
    die_with_parent,
    exclusive_server_lock,
    free_port,
    spawn,
    start_worker,
    stop_on_signals,
    stop_orphan,
    temporal_binary,
    wait_for_ui,
)
from .render import console, run_command
from .serve import start_http

__all__ = [
    "DevServer",
    "advertise",
    "dev",
    "run_dev",
    "start_dev_server",
    "workflows_url",
]


def dev(
    app: Annotated[
        str | None,
        typer.Option(
            "--app", help=f"module:attr of the worker app (default: ${ENV_APP}, else the demo app)."
        ),
    ] = None,
    store: StoreOpt = None,
    task_queue: QueueOpt = None,
    port: Annotated[int, typer.Option(help="gRPC port (another is picked if taken).")] = 7233,
    ui_port: Annotated[int, typer.Option(help="Web UI port (another is picked if taken).")] = 8233,
    log_format: LogFormatOpt = "text",
) -> None:
    """Run a Temporal dev server (with its Web UI) and a worker until Ctrl-C.

    Other commands (run, chat, state) find this server without TEMPORAL_ADDRESS."""
    code = run_command(
        lambda: run_dev(
            console,
            app_ref=app or os.environ.get(ENV_APP) or DEMO_APP,
            store_spec=resolve_store_spec(store),
            task_queue=task_queue or os.environ.get(ENV_TASK_QUEUE) or DEFAULT_TASK_QUEUE,
            port=port,
            ui_port=ui_port,
            log_format=log_format,
        )
    )
    raise typer.Exit(code)


# -- the dev server -------------------------------------------------------------------------------


@dataclass
class DevServer:
    """A running ``temporal server start-dev`` (``process`` is None when it is someone else's)."""

    address: str
    ui_url: str
    process: ManagedProcess | None


def workflows_url(ui_url: str, session_id: str, namespace: str = "default") -> str:
    """The Web UI's workflow list filtered to one session's runs (publish and compaction
    workflows carry the session ID too, with another ``DurableAgentKind``)."""
    query = f'{SEARCH_ATTRIBUTE}="{session_id}" AND {KIND_ATTRIBUTE}="run"'
    return f"{ui_url}/namespaces/{namespace}/workflows?query={urllib.parse.quote(query, safe='')}"


async def _wait_client(address: str, proc: ManagedProcess, deadline: float) -> None:
    last: BaseException | None = None
    while time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # a server that cannot bind its ports has exited by then
        if not proc.running():
            raise proc.exited()
        try:
            client = await asyncio.wait_for(Client.connect(address), 5)
            await client.service_client.check_health()
        except Exception as exc:  # not up yet
            last = exc
            continue
        if proc.running():  # else the port answered for another process's server
            return
    raise ProcessError(f"the Temporal server at {address} did not answer in time ({last})")


async def start_dev_server(
    root: Path,
    *,
    port: int | None = 7233,
    ui_port: int | None = 8233,
) -> DevServer:
    """Start a dev server on ``root/temporal.db`` and wait until it answers gRPC (and the UI).
    A port another process binds between the check and the server's bind is picked anew."""
    for _ in range(2):
        try:
            return await _start_dev_server(root, port, ui_port)
        except ProcessError as exc:
            if "address already in use" not in str(exc):
                raise
            port = ui_port = None  # the kernel's picks this time
    return await _start_dev_server(root, port, ui_port)


async def _start_dev_server(root: Path, port: int | None, ui_port: int | None) -> DevServer:
    grpc_port = free_port(port)
    web_port = free_port(ui_port, avoid=[grpc_port])
    argv = [temporal_binary(), "server", "start-dev", "--ip", "127.0.0.1"]
    argv += ["--port", str(grpc_port), "--db-filename", str(root / "temporal.db")]
    argv += ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]
    argv += ["--log-level", "warn"]
    argv += ["--search-attribute", f"{SEARCH_ATTRIBUTE}=Keyword"]
    argv += ["--search-attribute", f"{KIND_ATTRIBUTE}=Keyword"]
    argv += ["--ui-port", str(web_port)]
    log = root / "logs" / "temporal.log"
    proc = spawn("Temporal server", die_with_parent(argv), log, dict(os.environ))
    address = f"127.0.0.1:{grpc_port}"
    deadline = time.monotonic() + 60
    try:
        await _wait_client(address, proc, deadline)
        server = DevServer(address, f"http://127.0.0.1:{web_port}", proc)
        await wait_for_ui(server.ui_url, min(deadline, time.monotonic() + 15))
    except BaseException:
        proc.stop()
        raise
    return server


def advertise(root: Path, server: DevServer, task_queue: str) -> None:
    """Write ``server.json`` for the server this process started (see the module docstring)."""
    assert server.process is not None
    info = ServerInfo(
        pid=server.process.pid,
        owner_pid=os.getpid(),
        address=server.address,
        ui_url=server.ui_url,
        task_queue=task_queue,
    )
    write_server_info(root, info)


# -- dev ------------------------------------------------------------------------------------------


async def run_dev(
    console: Console,
    *,
    app_ref: str,
    store_spec: str,
    task_queue: str,
    port: int,
    ui_port: int,
    log_format: str = "text",
) -> int:
    """The ``dev`` command: the exit code (1 when the server exits on its own)."""
    root = data_dir()
    lock = exclusive_server_lock(root)
    workers: list[ManagedProcess] = []
    server, http = None, None
    try:
        orphan = stop_orphan(root, root / "temporal.db")
        if orphan is not None:
            console.print(f"stopped Temporal server {orphan}, left behind by an interrupted run")
        server = await start_dev_server(root, port=port, ui_port=ui_port)
        advertise(root, server, task_queue)

        async def start() -> ManagedProcess:
            worker = await start_worker(
                name="worker",
                app_ref=app_ref,
                store_spec=store_spec,
                task_queue=task_queue,
                address=server.address,
                log_path=root / "logs" / "dev-worker.log",
                ready_dir=root / "run",
                log_format=log_format,
            )
            workers.append(worker)
            return worker

        worker = await start()
        chat, http = await _dev_http(store_spec, server.address, task_queue, app_ref)
        stop = stop_on_signals(signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # a clean stop
        say_up(
            console,
            f"  Temporal gRPC  {server.address}   (export TEMPORAL_ADDRESS={server.address})",
            f"  Web UI         {server.ui_url}",
            f"  chat           {chat}",
            f"  worker         pid {worker.pid}, app {app_ref}, queue {task_queue}",
            f"  store          {display_store(store_spec)}",
            f"  logs           {root / 'logs'}",
            "  try:           durable-agent chat my-session",
        )
        return await _supervise(console, server, worker, start, stop)
    finally:
        if http is not None:  # stopped, not left to asyncio.run to cancel (uvicorn's traceback)
            http.cancel()
            await asyncio.gather(http, return_exceptions=True)
        for w in workers:
            w.stop()
        if server is not None and server.process is not None:
            server.process.stop()
            remove_server_info(root, os.getpid())
        lock.release()


def _stop_at_once_on_signals(console: Console) -> None:
    """While ``dev`` stops (its chat page's requests, its worker's calls, its server, each given
    seconds), a signal ends it there and then (128 + the signal), as a second one stops a
    worker: its server follows by its parent-death signal, its worker by its parent watch. A
    handler of the process, not the loop's: the stops of the children block the loop."""

    def now(sig: int, _: FrameType | None) -> None:
        console.print("stopped at once (a second signal)")
        os._exit(128 + sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, now)


def say_up(console: Console, *banner: str) -> None:
    """The banner, each line whole however narrow the terminal or pipe (a wrapped URL or path
    cannot be copied) and as plain text (a path may hold brackets)."""
    console.print("[bold green]durable-agent dev[/] is up (Ctrl-C stops it)", soft_wrap=True)
    for line in banner:
        console.print(line, markup=False, soft_wrap=True)


async def _supervise(
    console: Console,
    server: DevServer,
    worker: ManagedProcess,
    start: Callable[[], Awaitable[ManagedProcess]],
    stop: asyncio.Event,
) -> int:
    """Until ``stop`` (Ctrl-C, SIGTERM, SIGHUP): restart a worker that exits, stop if the
    server does."""
    assert server.process is not None
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
        if not server.process.running():
            console.print(f"[red]the Temporal server exited[/]:\n{server.process.log_tail()}")
            return 1
        if not worker.running():
            console.print(
                f"[yellow]worker {worker.pid} exited ({worker.proc.returncode}); restarting[/]"
            )
            t0 = time.monotonic()
            worker = await start()
            console.print(f"worker {worker.pid} up in {time.monotonic() - t0:.1f} s")
    _stop_at_once_on_signals(console)
    console.print("stopping")
    return 0


# -- the chat page -------------------------------------------------------------------------------


async def _dev_http(
    store_spec: str, address: str, task_queue: str, app_ref: str
) -> tuple[str, asyncio.Task[None] | None]:
    """``dev``'s chat page and its task, or why there is none (the server extra missing)."""
    try:
        import uvicorn  # noqa: F401
    except ImportError:
        return "pip install '.[server]' (from the durable-agent clone) for the chat page", None
    client = await connect(TemporalFlags(address=address))
    agents = ["demo"] if app_ref == DEMO_APP else None
    return await start_http(store_spec, client, task_queue, port=free_port(8000), agents=agents)
