"""MongoStore's append feed: one change stream per store object
(docs/design.md#following-a-session).

A follower of a session (a run's client, the HTTP server's hub) reads the store when woken and
otherwise polls with back-off. On a replica set (MongoDB's change streams need one; the project's
docker-compose runs a single-node one) this feed wakes it when an append commits, so a receipt
reaches its client within a round trip of the write and an idle follower reads rarely. The
stream watches the entries collection for inserts (batch documents and fences) and carries only
each one's session ID; it is opened when the first follower watches and closed a while after the
last one stops (:data:`LINGER`).

Where the server has no change streams (a standalone ``mongod``, FerretDB: the open fails with
an ``OperationFailure``) the feed says so once in the log and stays down for the store object's
life: followers poll, as without it. A stream that breaks (the server restarts, a failover)
wakes every follower, which then polls until the stream is open again (tried again after 1 s,
doubling up to 30 s), and wakes them all once more when it is.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from typing import Any

from pymongo.errors import InvalidOperation, OperationFailure, PyMongoError

from ..appends import AppendWatchers, Watch

__all__ = ["LINGER", "PIPELINE", "ChangeFeed"]

logger = logging.getLogger("durable_agent.mongo")

PIPELINE: list[dict[str, Any]] = [
    {"$match": {"operationType": "insert"}},
    {"$project": {"fullDocument.session_id": 1}},
]
"""Inserts into the entries collection, each reduced to its session ID (and its resume token)."""
LINGER = 30.0
"""Seconds the stream stays open after its last follower stopped watching (runs come and go)."""
RETRY_FIRST, RETRY_MOST = 1.0, 30.0
"""Seconds before the stream is opened again after it broke: the first wait, and the longest."""


class ChangeFeed:
    """The append feed of one MongoStore object (module doc)."""

    def __init__(self, entries: Any) -> None:
        self._entries = entries
        self._watchers = AppendWatchers(live=False, on_empty=self._emptied)
        self._task: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._unavailable = False
        self._stop: asyncio.TimerHandle | None = None

    def watch(self, session_id: str, wake: Callable[[], None]) -> Watch:
        watch = self._watchers.add(session_id, wake, self._ready)
        if self._stop is not None:
            self._stop.cancel()
            self._stop = None
        if (self._task is None or self._task.done()) and not self._unavailable:
            self._settled.clear()
            self._task = asyncio.get_running_loop().create_task(self._run())
        return watch

    async def _ready(self) -> bool:
        if self._task is not None:
            await self._settled.wait()
        return self._watchers.live

    def _emptied(self) -> None:
        if self._task is None or self._stop is not None:
            return
        self._stop = self._task.get_loop().call_later(LINGER, self._close)

    def close(self) -> None:
        """For good (the store was closed): stop the stream; followers poll, and are told."""
        self._unavailable = True
        if self._stop is not None:
            self._stop.cancel()
        self._stop = None
        if self._task is not None:
            self._task.cancel()
        self._task = None
        self._settled.set()  # a follower waiting to know whether the feed is up: it is not

    def _close(self) -> None:
        self._stop = None
        if self._task is not None and not len(self._watchers):
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        delay = RETRY_FIRST
        while True:
            try:
                stream = self._entries.watch(PIPELINE)
                if inspect.isawaitable(stream):  # PyMongo's async API (Motor's returns it)
                    stream = await stream
            except (OperationFailure, TypeError, InvalidOperation) as exc:
                # no change streams here, not allowed, or the client was closed: poll from now on
                if not isinstance(exc, InvalidOperation):
                    why = getattr(exc, "details", None) or {}
                    logger.info(
                        "MongoStore: no change streams here (%s): followers poll the store",
                        why.get("errmsg") or exc,
                    )
                self._unavailable, self._task = True, None
                self._settled.set()
                return
            except PyMongoError as exc:  # the server is down: followers poll meanwhile
                logger.debug("MongoStore: opening the change stream: %s", exc)
                self._settled.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MOST)
                continue
            delay = RETRY_FIRST
            await self._follow(stream)
            await asyncio.sleep(delay)

    async def _follow(self, stream: Any) -> None:
        """Wake the watchers of each insert's session until the stream breaks (or the feed
        closes); every watcher reads when it goes up and again when it goes down."""
        self._watchers.live = True
        self._settled.set()
        self._watchers.notify_all()
        try:
            async for change in stream:
                session_id = (change.get("fullDocument") or {}).get("session_id")
                if isinstance(session_id, str):
                    self._watchers.notify(session_id)
        except PyMongoError as exc:
            logger.debug("MongoStore: the change stream broke: %s", exc)
        except Exception:  # never the followers' problem: they poll until it is open again
            logger.exception("MongoStore: following the change stream")
        finally:
            self._watchers.live = False
            self._watchers.notify_all()
            closed = stream.close()
            if inspect.isawaitable(closed):
                await asyncio.shield(closed)
