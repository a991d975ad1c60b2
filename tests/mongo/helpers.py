"""Entries with fixed content, raw batch documents, and a command listener for the Mongo tests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from pymongo import AsyncMongoClient, monitoring

from durable_agent.ai import Message, TextContent
from durable_agent.session import Entry, MessageEntry, encode_entry
from durable_agent.stores.mongo.incarnation import id_range

T0 = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
MIB = 1024 * 1024


def entry(eid: str, text: str | None = None, parent: str | None = None) -> MessageEntry:
    """A message entry with fixed content, so re-creating it gives an identical encoding."""
    message = Message(role="user", content=[TextContent(text=text or eid)], timestamp=T0)
    return MessageEntry(id=eid, parent_id=parent, created_at=T0, message=message)


def ids(entries: Sequence[Entry]) -> list[str]:
    return [e.id for e in entries]


def inc_of(sync_db: Any, sid: str) -> str:
    """The incarnation of a session, from its session document."""
    inc: str = sync_db.sessions.find_one({"_id": sid})["inc"]
    return inc


def batch_doc(
    sync_db: Any, sid: str, entries: Sequence[Entry], seq: int, **fields: Any
) -> dict[str, Any]:
    """A batch document as the store writes it for the session's current incarnation
    (``fields`` override or add fields)."""
    inc = inc_of(sync_db, sid)
    return {
        "_id": f"{sid}/{inc}#{seq}",
        "session_id": sid,
        "inc": inc,
        "entry_id": entries[0].id,
        "seq": seq,
        "keys": [f"{sid}/{inc}/{e.id}" for e in entries],
        "wires": [encode_entry(e) for e in entries],
        **fields,
    }


def keys_of(sync_db: Any, sid: str) -> list[list[str]]:
    """The entry IDs of each batch document of a session, in ``seq`` order (fences left out)."""
    docs = sync_db.entries.find({"session_id": sid, "fence": {"$exists": False}}).sort("seq", 1)
    return [[key.split("/", 2)[2] for key in doc["keys"]] for doc in docs]


def of_session(sid: str) -> dict[str, Any]:
    """A filter for a session's claims and slots: their ``_id`` starts with ``<sid>/``."""
    return {"_id": id_range(sid)}


def claim_ids(sync_db: Any, sid: str) -> set[str]:
    """The entry IDs a session's claims are for (slots, ``<sid>/<inc>#<seq>``, left out)."""
    claims = sync_db.entries_claims.find(of_session(sid))
    return {d["_id"].split("/", 2)[2] for d in claims if d["_id"].count("/") >= 2}


def unsettled_slots(sync_db: Any, sid: str) -> list[str]:
    """The slots of a session whose place holds neither a document nor a fence."""
    slots = sync_db.entries_claims.find({**of_session(sid), "n": {"$exists": True}})
    return sorted(
        slot["_id"]
        for slot in slots
        if sync_db.entries.find_one({"_id": slot["_id"]}, {"_id": 1}) is None
    )


def assert_writer_orders(loaded: list[Entry], writers: dict[str, list[str]]) -> None:
    """No loss, no duplicate, and each writer's entries appear in the order it wrote them."""
    got = ids(loaded)
    assert len(got) == len(set(got))
    assert sorted(got) == sorted(eid for written in writers.values() for eid in written)
    for written in writers.values():
        assert [eid for eid in got if eid in set(written)] == written


class Commands(monitoring.CommandListener):
    """Every command a client sends (name and body), with events tests can wait on, and hooks
    that run once, synchronously: when the next reply to a command arrives (before the client's
    caller sees it), or before a command matching a test is sent."""

    def __init__(self) -> None:
        self.log: list[tuple[str, dict[str, Any]]] = []
        self.waiters: dict[tuple[str, str], asyncio.Event] = {}
        self._hook: tuple[str, Callable[[], object]] | None = None
        self._before: tuple[Callable[[dict[str, Any]], bool], Callable[[], object]] | None = None

    def names(self) -> list[str]:
        return [name for name, _ in self.log]

    def wait_for(self, phase: str, command: str) -> asyncio.Event:
        """An event set when ``command`` reaches ``phase`` ("started" or "succeeded")."""
        return self.waiters.setdefault((phase, command), asyncio.Event())

    def arm(self, hook: Callable[[], object], after: str) -> None:
        """Run ``hook`` when the next reply to an ``after`` command arrives."""
        self._hook = (after, hook)

    def arm_before(
        self, hook: Callable[[], object], when: Callable[[dict[str, Any]], bool]
    ) -> None:
        """Run ``hook`` before the first command whose body ``when`` accepts is sent."""
        self._before = (when, hook)

    def _fire(self, phase: str, command: str) -> None:
        waiter = self.waiters.get((phase, command))
        if waiter is not None:
            waiter.set()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        body = dict(event.command)
        self.log.append((event.command_name, body))
        if self._before is not None and self._before[0](body):
            hook = self._before[1]
            self._before = None
            hook()
        self._fire("started", event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if self._hook is not None and self._hook[0] == event.command_name:
            hook = self._hook[1]
            self._hook = None
            hook()
        self._fire("succeeded", event.command_name)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._fire("failed", event.command_name)


class Counted(monitoring.CommandListener):
    """Sets ``done`` once ``wanted`` commands named ``command`` succeeded since ``count`` was
    last reset."""

    def __init__(self, command: str, wanted: int) -> None:
        self.command = command
        self.wanted = wanted
        self.count = 0
        self.done = asyncio.Event()

    def reset(self) -> None:
        self.count = 0
        self.done.clear()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if event.command_name == self.command:
            self.count += 1
            if self.count >= self.wanted:
                self.done.set()

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def elsewhere(uri: str, database: str, work: Callable[[Any], Awaitable[object]]) -> object:
    """Run ``work`` on a MongoStore of its own, on a client and event loop of its own, to the
    end, as another process would; callable from a synchronous command hook (it blocks the
    hooked client's loop meanwhile). Returns what ``work`` returned or the exception it raised."""
    from durable_agent.stores.mongo import MongoStore

    async def main() -> object:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, tz_aware=True)
        try:
            return await work(MongoStore(client[database]))
        except Exception as exc:
            return exc
        finally:
            await client.close()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result()


class HeldInsert:
    """Holds the next batch-document ``insert_one`` of a :class:`HeldDatabase`'s ``entries``
    collection: ``reached`` is set when it starts; it goes on when ``release`` is set, or fails
    with ``fail`` if that is set then (a writer that dies between its slot and its document)."""

    def __init__(self) -> None:
        self.armed = False
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def wait(self, doc: dict[str, Any]) -> None:
        if not self.armed or doc.get("fence"):
            return
        self.armed = False
        self.reached.set()
        await self.release.wait()
        if self.fail is not None:
            raise self.fail


class _HeldEntries:
    def __init__(self, collection: Any, hold: HeldInsert) -> None:
        self._collection = collection
        self._hold = hold

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    async def insert_one(self, doc: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        await self._hold.wait(doc)
        return await self._collection.insert_one(doc, *args, **kwargs)


class HeldDatabase:
    """A database whose ``entries`` collection's inserts pass through ``hold`` (the rest is the
    wrapped database's)."""

    def __init__(self, database: Any, hold: HeldInsert) -> None:
        self._database = database
        self._hold = hold

    def __getattr__(self, name: str) -> Any:
        return getattr(self._database, name)

    def get_collection(self, name: str, **options: Any) -> Any:
        collection = self._database.get_collection(name, **options)
        return _HeldEntries(collection, self._hold) if name == "entries" else collection
