"""Lifecycle events and the in-process publisher (SPEC §6.2, §6.3), decision 19.

The publisher is a client-side, in-process feature (under Temporal the worker owns it), so these
tests call ``new`` directly.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from typing import Any

import pytest

from durable_agent import (
    CompactError,
    CompactionEntry,
    EntryNotFoundError,
    Event,
    MessageEntry,
    ModelError,
    SessionExistsError,
    StoreUnavailableError,
    model,
    new,
)
from durable_agent.ai import Reply, ScriptedModel, TextContent, assistant_message
from durable_agent.session import Entry, SessionRecord, Store
from durable_agent.stores import MemoryStore

KEY_INIT = re.compile(r"session_init:(?P<sid>[^:]+):(?P<open>[0-9a-f]{16})")


def reply(text: str) -> MessageEntry:
    return MessageEntry(message=assistant_message(TextContent(text=text)))


class Recorder:
    """A publisher object with a sync ``publish`` method."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def publish(self, event: Event) -> None:
        self.events.append(event)


class AsyncRecorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def publish(self, event: Event) -> None:
        await asyncio.sleep(0)
        self.events.append(event)


class Exploding:
    def __init__(self) -> None:
        self.attempts: list[str] = []

    def publish(self, event: Event) -> None:
        self.attempts.append(event.type)
        raise RuntimeError(f"broker down for {event.type}")


async def test_session_init_on_create_and_resume(store: Store) -> None:
    rec = Recorder()
    agent = await new(None, store=store, session_id="init", publisher=rec)
    (init,) = rec.events
    assert (init.type, init.session_id, init.leaf_id) == ("session_init", "init", "")
    first_key = init.idempotency_key or ""
    match = KEY_INIT.fullmatch(first_key)
    assert match and match["sid"] == "init"
    assert init.agent is None and init.entries is None
    await agent.append("x")
    rec.events.clear()
    again = await new(None, store=store, session_id="init", publisher=rec)
    (resumed,) = rec.events
    assert resumed.leaf_id == again.leaf_id != ""
    assert resumed.idempotency_key != first_key  # unique per occurrence
    assert KEY_INIT.fullmatch(resumed.idempotency_key or "")


@pytest.mark.parametrize("kind", ["callable", "async-callable", "sync-object", "async-object"])
async def test_sync_and_async_publishers(kind: str) -> None:
    events: list[Event] = []
    publisher: Any
    if kind == "callable":
        publisher = events.append
    elif kind == "async-callable":

        async def publisher(event: Event) -> None:
            await asyncio.sleep(0)
            events.append(event)

    elif kind == "sync-object":
        rec = Recorder()
        rec.events = events
        publisher = rec
    else:
        arec = AsyncRecorder()
        arec.events = events
        publisher = arec
    agent = await new(model(ScriptedModel(["summary"])), publisher=publisher)
    await agent.append("q", reply("a"))
    await agent.branch(agent.leaf_id)
    await agent.fork("sync-async-child")
    await agent.compact()
    assert [e.type for e in events] == [
        "session_init",
        "session_branched",
        "session_forked",
        "session_init",
        "session_compacted",
    ]


async def test_no_publisher_changes_nothing() -> None:
    agent = await new(model(ScriptedModel(["s"])))
    await agent.append("q", reply("a"))
    await agent.branch("")
    await agent.branch(agent.entries()[-1].id)
    assert await agent.compact() is not None


async def test_publisher_exceptions_are_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pub = Exploding()
    caplog.set_level(logging.ERROR, logger="durable_agent.publisher")
    agent = await new(model(ScriptedModel(["summary"])), publisher=pub)
    await agent.append("q", reply("a"))
    (first, second) = agent.entries()
    await agent.branch(first.id)
    assert agent.leaf_id == first.id  # the change stands
    await agent.branch(second.id)
    child = await agent.fork("logged-child")
    assert child.leaf_id
    entry = await agent.compact()
    assert entry is not None and agent.leaf_id == entry.id
    # every event was attempted (a failing forked does not hold back the child's init)
    assert pub.attempts == [
        "session_init",
        "session_branched",
        "session_branched",
        "session_forked",
        "session_init",
        "session_compacted",
    ]
    records = [r for r in caplog.records if r.name == "durable_agent.publisher"]
    assert len(records) == 6
    assert all(r.exc_info is not None for r in records)


async def test_async_publisher_exception_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def publisher(event: Event) -> None:
        raise ConnectionError("nope")

    caplog.set_level(logging.ERROR, logger="durable_agent.publisher")
    agent = await new(None, publisher=publisher)
    await agent.branch("")
    assert len([r for r in caplog.records if r.name == "durable_agent.publisher"]) == 2


async def test_events_are_published_after_commit(store: Store) -> None:
    agent_ref: list[Any] = []
    checks: list[str] = []

    async def publisher(event: Event) -> None:
        if not agent_ref:
            return
        agent = agent_ref[0]
        if event.type == "session_branched":
            assert agent.leaf_id == event.leaf_id
            checks.append("branched")
        elif event.type == "session_forked":
            stored = await store.load_entries(event.session_id)
            assert len(stored) == 2
            checks.append("forked")
        elif event.type == "session_compacted":
            assert event.entries is not None
            stored = await store.load_entries(event.session_id)
            assert stored[-1] == event.entries[0]
            assert agent.leaf_id == event.leaf_id == event.entries[0].id
            checks.append("compacted")

    agent = await new(
        model(ScriptedModel(["s"])), store=store, session_id="after-commit", publisher=publisher
    )
    agent_ref.append(agent)
    await agent.append("q", reply("a"))
    await agent.branch(agent.entries()[0].id)
    await agent.branch(agent.entries()[1].id)
    await agent.fork("after-commit-child")
    await agent.compact()
    assert checks == ["branched", "branched", "forked", "compacted"]


async def test_publisher_can_call_back_into_the_agent() -> None:
    """The publisher runs outside the lock: a mutating call from it does not deadlock."""
    agent_ref: list[Any] = []
    appended: list[Entry] = []

    async def publisher(event: Event) -> None:
        if event.type == "session_branched" and agent_ref and not appended:
            appended.extend(await agent_ref[0].append("written by the publisher"))

    agent = await new(None, publisher=publisher)
    agent_ref.append(agent)
    (q,) = await agent.append("q")
    await asyncio.wait_for(agent.branch(q.id), 5)
    assert len(appended) == 1 and agent.leaf_id == appended[0].id


async def test_compacted_event_fields(store: Store) -> None:
    rec = Recorder()
    agent = await new(
        model(ScriptedModel(["the summary"])), store=store, session_id="compacted", publisher=rec
    )
    await agent.append("q", reply("a"))
    rec.events.clear()
    entry = await agent.compact()
    assert isinstance(entry, CompactionEntry)
    (event,) = rec.events
    assert event.type == "session_compacted" and event.session_id == "compacted"
    assert event.entries == [entry] and event.leaf_id == entry.id
    assert event.idempotency_key == f"session_compacted:compacted:{entry.id}"


async def test_fork_events_and_inherited_publisher(store: Store) -> None:
    rec = Recorder()
    source = await new(None, store=store, session_id="pub-src", publisher=rec)
    await source.append("q")
    rec.events.clear()
    child = await source.fork("pub-child")
    assert [(e.type, e.session_id, e.parent_id, e.leaf_id) for e in rec.events] == [
        ("session_forked", "pub-child", "pub-src", None),
        ("session_init", "pub-child", None, child.leaf_id),
    ]
    assert [e.idempotency_key for e in rec.events] == [
        "session_forked:pub-child:pub-src",
        "session_init:pub-child:fork",
    ]
    rec.events.clear()
    await child.branch("")
    grandchild = await child.fork("pub-grandchild")
    assert [(e.type, e.session_id) for e in rec.events] == [
        ("session_branched", "pub-child"),
        ("session_forked", "pub-grandchild"),
        ("session_init", "pub-grandchild"),
    ]
    assert rec.events[1].parent_id == "pub-child"
    assert grandchild.leaf_id == ""


async def test_branched_keys_are_unique_per_call() -> None:
    rec = Recorder()
    agent = await new(None, session_id="keys", publisher=rec)
    rec.events.clear()
    await agent.branch("")
    await agent.branch("")
    keys = [e.idempotency_key for e in rec.events]
    assert len(set(keys)) == 2
    assert all(re.fullmatch(r"session_branched:keys:[0-9a-f]{16}", k or "") for k in keys)
    assert [e.from_id for e in rec.events] == ["", ""]


# -- nothing published ------------------------------------------------------------------------


class FailingLoads:
    def __init__(self, inner: Store) -> None:
        self.inner = inner

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        raise StoreUnavailableError("down")

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        await self.inner.append_entries(session_id, entries)


async def test_nothing_published_for_failures_noops_appends_runs_and_close() -> None:
    rec = Recorder()
    with pytest.raises(StoreUnavailableError):
        await new(None, store=FailingLoads(MemoryStore()), publisher=rec)
    assert rec.events == []

    store = MemoryStore()
    lm = ScriptedModel(["a1", Reply(error=ModelError("bad", retryable=False)), "a2"])
    agent = await new(model(lm), store=store, session_id="quiet", publisher=rec)
    rec.events.clear()
    assert await agent.compact() is None  # no-op compaction
    await agent.append("appended")  # append
    await (await agent.run("q1")).wait()  # run receipts
    with pytest.raises(CompactError):
        await agent.compact()  # failed compaction
    with pytest.raises(EntryNotFoundError):
        await agent.branch("nope")  # failed branch
    await store.create_session("quiet-taken")
    with pytest.raises(SessionExistsError):
        await agent.fork("quiet-taken")  # failed fork
    await agent.close()  # close
    assert rec.events == []
