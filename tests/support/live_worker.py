"""A worker process whose agent streams one long reply slowly (issue 13's crash test).

``python -m tests.support.live_worker --address A --task-queue Q --markers DIR (--root R |
--mongo-uri U --mongo-db D) [--crash]``. Agent ``live`` answers every request with
:data:`LIVE_TEXT`, 4 characters every 30 ms. With ``--crash`` the process writes the marker
``streaming`` once its reply has streamed a third of the text, then stops streaming (the
activity keeps heartbeating) until the test SIGKILLs it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import traceback
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from durable_agent import Reply, ScriptedModel
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.session import Store
from durable_agent.workflows import AgentSpec, connect, create_worker

AGENT = "live"
LIVE_TEXT = "Streaming live from the worker, token by token, while history stays flat. " * 3
MARKER = "streaming"


class ParkingModel:
    """Streams the scripted reply; with ``crash`` parks a third of the way in."""

    def __init__(self, markers: Path, crash: bool) -> None:
        self.inner = ScriptedModel(lambda _: Reply(text=LIVE_TEXT, chunk_size=4, chunk_delay=0.03))
        self.markers = markers
        self.crash = crash

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        async for event in self.inner.stream(request):
            yield event
            if self.crash and len(event.partial.text()) >= len(LIVE_TEXT) // 3:
                tmp = self.markers / f".{MARKER}.tmp"
                tmp.write_text(str(os.getpid()))
                tmp.replace(self.markers / MARKER)
                await asyncio.sleep(3600)


def build_store(args: argparse.Namespace) -> Store:
    if args.mongo_uri:
        from pymongo import AsyncMongoClient

        from durable_agent.stores.mongo import MongoStore

        client: AsyncMongoClient[Any] = AsyncMongoClient(args.mongo_uri)
        return MongoStore(client[args.mongo_db])
    from durable_agent.stores import FileStore

    return FileStore(args.root, fsync=False)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--address", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--root")
    parser.add_argument("--mongo-uri")
    parser.add_argument("--mongo-db", default="durable_agent")
    parser.add_argument("--markers", required=True)
    parser.add_argument("--crash", action="store_true")
    args = parser.parse_args(argv)
    markers = Path(args.markers)
    client = await connect(args.address)
    worker = await create_worker(
        client,
        task_queue=args.task_queue,
        store=build_store(args),
        agents={AGENT: AgentSpec(model=ParkingModel(markers, args.crash))},
        workflow_failure_exception_types=[Exception],
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        graceful_shutdown_timeout=timedelta(seconds=1),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    async with worker:
        (markers / f"ready-{os.getpid()}").write_text("")
        await stop.wait()


if __name__ == "__main__":
    Path(sys.argv[sys.argv.index("--markers") + 1]).mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(main())
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
