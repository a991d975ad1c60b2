"""Who watches a store's sessions' appends, and waking them (docs/design.md#following-a-session).

A store that can tell its readers of appends (:class:`~durable_agent.session.store.AppendFeed`)
keeps one :class:`AppendWatchers` and calls :meth:`~AppendWatchers.notify` once an append has
committed: ``MemoryStore`` from the append itself, ``MongoStore`` from its change stream. Each
watch is woken on the event loop it was made on, since a ``MemoryStore`` is shared across threads
(thread-pool activities) and a watcher's wake-up touches its loop's objects.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable

__all__ = ["AppendWatchers", "Watch"]


class Watch:
    """One reader's watch on one session (:class:`~durable_agent.session.store.AppendWatch`)."""

    def __init__(
        self,
        watchers: AppendWatchers,
        session_id: str,
        wake: Callable[[], None],
        ready: Callable[[], Awaitable[bool]],
    ) -> None:
        self.session_id = session_id
        self.wake = wake
        self.loop = asyncio.get_running_loop()
        self._watchers = watchers
        self._ready = ready

    @property
    def live(self) -> bool:
        return self._watchers.live

    async def ready(self) -> bool:
        return await self._ready()

    def close(self) -> None:
        self._watchers.drop(self)

    def call(self) -> None:
        """Wake the reader on its own loop (dropped if that loop is closed)."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        try:
            if running is self.loop:
                self.loop.call_soon(self.wake)
            else:
                self.loop.call_soon_threadsafe(self.wake)
        except RuntimeError:  # its loop is closed: the reader is gone
            self.close()


class AppendWatchers:
    """The watches of one store object, by session ID; :attr:`live` says whether the store's
    feed is up (set by the store)."""

    def __init__(self, live: bool, on_empty: Callable[[], None] = lambda: None) -> None:
        self.live = live
        self._on_empty = on_empty
        self._lock = threading.Lock()
        self._by_session: dict[str, list[Watch]] = {}

    def add(
        self, session_id: str, wake: Callable[[], None], ready: Callable[[], Awaitable[bool]]
    ) -> Watch:
        watch = Watch(self, session_id, wake, ready)
        with self._lock:
            self._by_session.setdefault(session_id, []).append(watch)
        return watch

    def drop(self, watch: Watch) -> None:
        with self._lock:
            watches = self._by_session.get(watch.session_id, [])
            if watch in watches:
                watches.remove(watch)
            if not watches:
                self._by_session.pop(watch.session_id, None)
            empty = not self._by_session
        if empty:
            self._on_empty()

    def __len__(self) -> int:
        with self._lock:
            return sum(len(w) for w in self._by_session.values())

    def notify(self, session_id: str) -> None:
        """An append of ``session_id`` committed: wake its watchers."""
        with self._lock:
            watches = list(self._by_session.get(session_id, ()))
        for watch in watches:
            watch.call()

    def notify_all(self) -> None:
        """The feed went up or down: every watcher reads once (what it may have missed)."""
        with self._lock:
            watches = [w for ws in self._by_session.values() for w in ws]
        for watch in watches:
            watch.call()
