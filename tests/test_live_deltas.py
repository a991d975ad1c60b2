"""The live delta channels, writer and follower on their own, on real stores' channels:
order and restarts are decided by ``(attempt, seq)``, never by arrival, and the stored message
always wins at ``message_end``."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from durable_agent import Event
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent
from durable_agent.durable.live import DeltaFollower, DeltaWriter
from durable_agent.session.deltas import Delta, DeltaChannel, DeltaKey, diff_patch
from durable_agent.session.entries import MessageEntry
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.stores.memory import MemoryDeltas

KEY = DeltaKey("s1", "run1", 4)


@pytest.fixture(params=["memory", "file", "mongo"])
def channel(request: pytest.FixtureRequest, tmp_path: Path) -> DeltaChannel:
    """Each store's own channel, as ``live_deltas="auto"`` finds it."""
    if request.param == "memory":
        return MemoryStore().live_deltas()
    if request.param == "file":
        return FileStore(tmp_path).live_deltas()
    from durable_agent.stores.mongo import MongoStore

    return MongoStore(request.getfixturevalue("mongo_database")).live_deltas()


def text(t: str) -> Message:
    return Message(role="assistant", content=[TextContent(text=t)] if t else [])


def delta(attempt: int, seq: int, prev: str, cur: str) -> Delta:
    patch = diff_patch(text(prev) if prev else None, text(cur))
    assert patch is not None
    head, size, ops = patch
    return Delta(attempt=attempt, seq=seq, head=head, size=size, ops=ops)


async def publish(channel: DeltaChannel, attempt: int, texts: list[str], first: int = 1) -> None:
    prev = ""
    for i, cur in enumerate(texts):
        if i + 1 >= first:
            await channel.publish(KEY, delta(attempt, i + 1, prev, cur))
        prev = cur


def start() -> Event:
    inner = AgentEvent(type="message_start", message=Message(role="assistant"))
    return Event(type="agent", session_id=KEY.session_id, agent=inner)


def end(final: str) -> Event:
    entry = MessageEntry(id="e1", parent_id=None, message=text(final))
    inner = AgentEvent(type="message_end", message=text(final))
    return Event(
        type="agent", session_id=KEY.session_id, agent=inner, entries=[entry], leaf_id="e1"
    )


def shown(events: list[Event]) -> list[tuple[str, bool]]:
    out = []
    for e in events:
        assert e.agent is not None and e.agent.type == "message_update" and e.agent.message
        out.append((e.agent.message.text(), e.agent.restart))
    return out


async def following(channel: DeltaChannel) -> DeltaFollower:
    follower = DeltaFollower(channel, KEY.session_id, KEY.run_id)
    assert await follower.see(start(), KEY.position) == []
    return follower


async def test_channels_order_by_attempt_and_seq_and_clear(channel: DeltaChannel) -> None:
    await publish(channel, 2, ["a", "ab"])
    await publish(channel, 1, ["x", "xy", "xyz"])
    got = [(d.attempt, d.seq) for d in await channel.read(KEY)]
    assert got == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2)]
    assert [(d.attempt, d.seq) for d in await channel.read(KEY, (1, 2))] == [(1, 3), (2, 1), (2, 2)]
    assert await channel.read(DeltaKey("s1", "run1", 5)) == []
    await channel.clear(KEY)
    assert await channel.read(KEY) == []


async def test_a_hole_stops_the_reader_and_a_retry_restarts_it(channel: DeltaChannel) -> None:
    follower = await following(channel)
    await publish(channel, 1, ["He", "Hell"])
    assert shown(await follower.poll()) == [("He", False), ("Hell", False)]
    await publish(channel, 1, ["He", "Hell", "Hello", "Hello w"], first=4)  # seq 3 was lost
    assert await follower.poll() == []  # never past a hole
    await publish(channel, 2, ["Hi", "Hi there"])
    assert shown(await follower.poll()) == [("Hi", True), ("Hi there", False)]
    # a zombie attempt writing on gets ignored
    await publish(channel, 1, ["He", "Hell", "Hello", "Hello w", "Hello wo"], first=5)
    assert await follower.poll() == []
    assert shown(await follower.see(end("Hi there!"), KEY.position)) == [("Hi there!", False)]
    assert not follower.open


async def test_a_late_reader_starts_at_the_latest_attempt(channel: DeltaChannel) -> None:
    await publish(channel, 1, ["x", "xy", "xyz"])
    await publish(channel, 3, ["a", "ab"])
    follower = await following(channel)
    assert shown(await follower.poll()) == [("a", False), ("ab", False)]


async def test_the_stored_message_wins_at_message_end(channel: DeltaChannel) -> None:
    follower = await following(channel)
    await publish(channel, 2, ["Hi", "Hi the"])
    assert len(await follower.poll()) == 2
    # the stored reply is another attempt's (a zombie won the commit): one restart to it
    assert shown(await follower.see(end("Hello"), KEY.position)) == [("Hello", True)]
    # the drained tail arrives before the receipt; nothing more when the shown text is stored
    follower = await following(channel)
    await channel.clear(KEY)
    await publish(channel, 1, ["Al"])
    assert len(await follower.poll()) == 1
    await publish(channel, 1, ["Al", "All"], first=2)
    assert shown(await follower.see(end("All"), KEY.position)) == [("All", False)]


async def test_a_reply_stored_before_the_reader_looked_gets_no_deltas(
    channel: DeltaChannel,
) -> None:
    await publish(channel, 1, ["x", "xy"])
    follower = await following(channel)
    assert await follower.see(end("xy"), KEY.position) == []


class _Failing(MemoryDeltas):
    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.calls = 0

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError("store down")
        await super().publish(key, delta)


async def test_the_writer_batches_and_publishes_the_whole_reply() -> None:
    channel = MemoryDeltas()
    writer = DeltaWriter(channel, KEY, 1, every=0.05)
    final = ""
    for i in range(100):  # 100 tokens in about 0.2 s
        final += f"t{i} "
        writer.offer(text(final))
        await asyncio.sleep(0.002)
    await writer.finish(text(final))
    deltas = await channel.read(KEY)
    assert 2 <= len(deltas) <= 15, len(deltas)
    assert [d.seq for d in deltas] == list(range(1, len(deltas) + 1))
    follower = await following(channel)
    assert shown(await follower.poll())[-1] == (final, False)


async def test_a_failed_write_stops_the_attempt_without_a_hole() -> None:
    channel = _Failing(fail_at=2)
    writer = DeltaWriter(channel, KEY, 1, every=0.0)
    for t in ["a", "ab", "abc"]:
        writer.offer(text(t))
        await asyncio.sleep(0.01)
    await writer.finish(text("abcd"))
    assert [d.seq for d in await channel.read(KEY)] == [1]
    follower = await following(channel)
    assert shown(await follower.poll()) == [("a", False)]
    assert shown(await follower.see(end("abcd"), KEY.position)) == [("abcd", False)]


async def test_a_tool_call_growing_or_getting_its_id_is_no_restart() -> None:
    from durable_agent.ai.messages import ToolCall

    channel = MemoryDeltas()
    follower = await following(channel)
    partial = Message(
        role="assistant",
        content=[TextContent(text="Let me"), ToolCall(id="", name="f", arguments={})],
    )
    patch = diff_patch(None, partial)
    assert patch is not None
    await channel.publish(KEY, Delta(attempt=1, seq=1, head=patch[0], size=patch[1], ops=patch[2]))
    assert len(await follower.poll()) == 1
    stored = Message(
        role="assistant",
        content=[
            TextContent(text="Let me see"),
            ToolCall(id="call_1", name="f", arguments={"a": 1}),
        ],
    )
    entry = MessageEntry(id="e1", parent_id=None, message=stored)
    inner = AgentEvent(type="message_end", message=stored)
    end_event = Event(type="agent", session_id="s1", agent=inner, entries=[entry], leaf_id="e1")
    [update] = await follower.see(end_event, KEY.position)
    assert update.agent is not None and update.agent.message == stored
    assert not update.agent.restart
    # another call (or a rewritten text) is a restart
    follower = await following(channel)
    assert len(await follower.poll()) == 1
    other = stored.model_copy(update={"content": [TextContent(text="No"), *stored.content[1:]]})
    entry = MessageEntry(id="e1", parent_id=None, message=other)
    inner = AgentEvent(type="message_end", message=other)
    end_event = Event(type="agent", session_id="s1", agent=inner, entries=[entry], leaf_id="e1")
    [update] = await follower.see(end_event, KEY.position)
    assert update.agent is not None and update.agent.restart


async def test_the_file_channel_sweeps_orphaned_and_expired_delta_files(tmp_path: Path) -> None:
    """Side files a crashed or hurried worker never cleared go as Mongo's TTL index takes its
    documents: a session's files unchanged for longer than the TTL, and any file of a session
    that no longer exists, are removed when a store object next starts streaming a reply."""
    worker = FileStore(tmp_path)
    for sid in ("idle", "ghost", "live"):
        await worker.create_session(sid)
    stale, fresh, orphan = (
        DeltaKey("idle", "run", 1),
        DeltaKey("idle", "run", 2),
        DeltaKey("ghost", "run", 1),
    )
    for key in (stale, fresh):
        await worker.live_deltas().publish(key, delta(1, 1, "", "partial"))
    await worker.delete_session("ghost")
    await worker.live_deltas().publish(orphan, delta(1, 1, "", "after the delete"))
    long_ago = time.time() - 3600
    os.utime(worker.live_deltas().path(stale), (long_ago, long_ago))

    restarted = FileStore(tmp_path).live_deltas()
    await restarted.publish(DeltaKey("live", "run", 1), delta(1, 1, "", "new"))

    assert await restarted.read(stale) == []
    assert await restarted.read(orphan) == []
    assert not (tmp_path / "ghost.live").exists()
    assert [d.seq for d in await restarted.read(fresh)] == [1]
    assert [d.seq for d in await restarted.read(DeltaKey("live", "run", 1))] == [1]
