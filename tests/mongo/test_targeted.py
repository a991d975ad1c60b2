"""Every command MongoStore sends is targeted at one session (docs/scaling.md): its filter, or the
documents it writes, name the session ID, or an ``_id`` prefixed by it, so on a cluster sharded by
session every read and write of a session goes to one shard. Three commands span sessions by
design: ``list_sessions`` (all records, or a prefix's, newest first); on a server without TTL
indexes (FerretDB), the sweep of expired live deltas (a small collection; MongoDB expires them
with a TTL index); and the append feed's change stream, one per store object (not per session) for
all the followers of a process (on a server without change streams it fails to open)."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from durable_agent.session import EntryConflictError
from durable_agent.stores.mongo import MongoStore
from durable_agent.stores.mongo.feed import PIPELINE
from tests.mongo.helpers import Commands, entry

pytestmark = pytest.mark.mongo

SID = "shard-s1"
ADMIN = {"createIndexes", "listIndexes", "ping", "hello", "isMaster", "buildInfo", "endSessions"}


def _names_session(value: Any) -> bool:
    """Whether a filter value pins the session: its ID, an ``_id`` prefixed by it, or an ``$in``
    of such."""
    if isinstance(value, str):
        return value == SID or value.startswith((f"{SID}/", f"{SID}#"))
    if isinstance(value, dict) and "$in" in value:
        return all(_names_session(v) for v in value["$in"])
    if isinstance(value, dict):
        return any(_names_session(v) for k, v in value.items() if k in ("$eq", "$gt", "$gte"))
    return False


def _targeted(query: dict[str, Any]) -> bool:
    if any(_names_session(query.get(key)) for key in ("session_id", "_id", "k")):
        return True
    return any(_targeted(q) for q in query.get("$and", []))


def _sweep(query: dict[str, Any]) -> bool:
    """The live-delta channel's sweep of expired deltas where the server has no TTL index."""
    return list(query) == ["at"] and list(query["at"]) == ["$lt"]


def _violations(name: str, body: dict[str, Any]) -> list[str]:
    if name in ADMIN or (name == "delete" and all(_sweep(d["q"]) for d in body["deletes"])):
        return []
    if name == "insert":
        docs = body.get("documents", [])
        return [
            f"insert {d}" for d in docs if not _targeted(d) and not _targeted({"_id": d.get("_id")})
        ]
    if name in ("update", "delete"):
        key = "updates" if name == "update" else "deletes"
        return [f"{name} {s['q']}" for s in body.get(key, []) if not _targeted(s["q"])]
    if name in ("find", "count", "distinct", "findAndModify"):
        query = body.get("filter", body.get("query", {}))
        return [] if _targeted(query) else [f"{name} {query}"]
    if name in ("getMore", "killCursors"):
        return []  # continues a find checked above
    if name == "aggregate":
        pipeline = body.get("pipeline", [])
        if pipeline and "$changeStream" in pipeline[0] and pipeline[1:] == PIPELINE:
            return []  # the append feed (module doc)
        return [f"aggregate {pipeline}"]
    return [f"unexpected {name}"]


async def test_every_command_of_a_session_is_targeted(
    client_factory: Any, mongo_database: AsyncDatabase[Any]
) -> None:
    commands = Commands()
    store = MongoStore(client_factory(event_listeners=[commands])[mongo_database.name])
    await store.ensure_indexes()
    commands.log.clear()
    await store.create_session(SID)
    await store.append_entries(SID, [entry("a"), entry("b")])
    await store.append_entries(SID, [entry("b"), entry("c")])  # b stored already: the careful path
    with pytest.raises(EntryConflictError):
        await store.append_entries(SID, [entry("c", "other")])
    await store.load_session(SID)
    assert [e.id for e in await store.load_entries(SID)] == ["a", "b", "c"]
    assert [s for s, _ in await store.load_entries_after(SID, 1)] == [2, 3]
    channel = store.live_deltas()
    from durable_agent.session.deltas import Delta, DeltaKey

    key = DeltaKey(SID, "run1", 1)
    await channel.publish(key, Delta(attempt=1, seq=1))
    assert len(await channel.read(key)) == 1
    assert await channel.held([key]) == {key}
    await channel.clear(key)
    watch = store.watch_appends(SID, lambda: None)
    await watch.ready()
    watch.close()
    await store.delete_session(SID)
    sent = [(name, body) for name, body in commands.log]
    assert {name for name, _ in sent} >= {"insert", "find", "delete", "aggregate"}
    problems = [v for name, body in sent for v in _violations(name, body)]
    assert problems == []

    commands.log.clear()
    await store.list_sessions(limit=10)
    [(name, body)] = [(n, b) for n, b in commands.log if n not in ADMIN]
    assert name == "find" and body["filter"] == {}  # the one scan: every record, newest first

    commands.log.clear()  # a tenant's: an anchored, escaped _id regex (MongoDB's _id index)
    assert await store.list_sessions(prefix="shard-") == []
    [(name, body)] = [(n, b) for n, b in commands.log if n not in ADMIN]
    assert name == "find" and body["filter"] == {"_id": {"$regex": r"^shard\-"}}
