"""``durable-agent dev``: a dev server, its Web UI and one worker, until Ctrl-C.

The server is advertised in ``<data dir>/server.json`` while it runs, so ``run``, ``chat`` and
``state`` in another terminal find it without ``TEMPORAL_ADDRESS``. If the worker dies it is
restarted (that is what a deployment would do); if the server dies, ``dev`` stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

from rich.console import Console

from .procs import (
    ManagedProcess,
    ProcessError,
    ServerLock,
    start_dev_server,
    start_worker,
    stop_orphan,
)
from .settings import ServerInfo, data_dir, read_server_info, remove_server_info, write_server_info

__all__ = ["run_dev"]


async def run_dev(
    console: Console,
    *,
    app_ref: str,
    store_spec: str,
    task_queue: str,
    port: int,
    ui_port: int,
) -> int:
    root = data_dir()
    lock = ServerLock(root)
    if not lock.try_acquire():
        info = read_server_info(root)
        where = f" (server {info.address}, owner pid {info.owner_pid})" if info else ""
        raise ProcessError(
            f"another durable-agent process is already serving {root / 'temporal.db'}{where}"
        )
    workers: list[ManagedProcess] = []
    server = None
    try:
        orphan = stop_orphan(root, root / "temporal.db")
        if orphan is not None:
            console.print(f"stopped Temporal server {orphan}, left behind by an interrupted run")
        server = await start_dev_server(root, port=port, ui_port=ui_port)
        assert server.process is not None
        write_server_info(
            root,
            ServerInfo(
                pid=server.process.pid,
                owner_pid=os.getpid(),
                address=server.address,
                ui_url=server.ui_url,
                task_queue=task_queue,
            ),
        )

        async def spawn() -> ManagedProcess:
            worker = await start_worker(
                name="worker",
                app_ref=app_ref,
                store_spec=store_spec,
                task_queue=task_queue,
                address=server.address,
                log_path=root / "logs" / "dev-worker.log",
                ready_dir=root / "run",
            )
            workers.append(worker)
            return worker

        worker = await spawn()
        console.print("[bold green]durable-agent dev[/] is up (Ctrl-C stops it)")
        console.print(
            f"  Temporal gRPC  {server.address}   (export TEMPORAL_ADDRESS={server.address})"
        )
        console.print(f"  Web UI         {server.ui_url}")
        console.print(f"  worker         pid {worker.pid}, app {app_ref}, queue {task_queue}")
        console.print(f"  store          {store_spec}")
        console.print(f"  logs           {root / 'logs'}")
        console.print("  try:           durable-agent chat my-session")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
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
                worker = await spawn()
                console.print(f"worker {worker.pid} up in {time.monotonic() - t0:.1f} s")
        console.print("stopping")
        return 0
    finally:
        for w in workers:
            w.stop()
        if server is not None and server.process is not None:
            server.process.stop()
            remove_server_info(root, os.getpid())
        lock.release()
