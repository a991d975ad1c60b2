"""The live delta channels, writer and follower on their own, on real stores' channels:
order and restarts are decided by ``(attempt, seq)``, never by arrival, the stored message
always wins at the reply's receipt, and every update's ``delta`` is the text it adds."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import Message, TextContent
from durable_agent.durable.follow import DeltaFollower
from durable_agent.durable.live import DeltaWriter
from durable_agent.session.deltas import (
    WRITE_EVERY,
    Delta,
    DeltaChannel,
    DeltaKey,
    ImmediateChannel,
    diff_parts,
    parts,
)
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.stores.file import FileDeltas
from durable_agent.stores.memory import MemoryDeltas
from tests.support.polling import eventually

KEY = DeltaKey("s1", "run1", 4)


@pytest.fixture(params=["memory", "file", "mongo"])
async def channel(request: pytest.FixtureRequest, tmp_path: Path) -> DeltaChannel:
    """Each store's own channel, as ``live_deltas="auto"`` finds it, with the session of
    ``KEY`` created (a channel keeps no reply of a session that does not exist)."""
    from durable_agent.stores.mongo import MongoStore

    store: MemoryStore | FileStore | MongoStore
    if request.param == "memory":
        store = MemoryStore()
    elif request.param == "file":
        store = FileStore(tmp_path)
    else:
        store = MongoStore(request.getfixturevalue("mongo_database"))
    await store.create_session(KEY.session_id)
    return store.live_deltas()


def text(t: str) -> Message:
    return Message(role="assistant", content=[TextContent(text=t)] if t else [])


def delta(attempt: int, seq: int, prev: str, cur: str) -> Delta:
    patch = diff_parts(parts(text(prev) if prev else None), parts(text(cur)))
    assert patch is not None
    head, size, ops = patch
    return Delta(attempt=attempt, seq=seq, head=head, size=size, ops=ops)


async def publish(channel: DeltaChannel, attempt: int, texts: list[str], first: int = 1) -> None:
    prev = ""
    for i, cur in enumerate(texts):
        if i + 1 >= first:
            await channel.publish(KEY, delta(attempt, i + 1, prev, cur))
        prev = cur


def shown(updates: Sequence[AgentEvent | None]) -> list[tuple[str, bool]]:
    """Text and restart of each update; each one's ``delta`` must be the text it adds (so the
    text ends with it, and after a restart is it)."""
    out = []
    for u in updates:
        assert u is not None and u.type == "message_update" and u.message and u.delta is not None
        assert u.message.text().endswith(u.delta)
        assert not u.restart or u.delta == u.message.text()
        out.append((u.message.text(), u.restart))
    return out


def following(channel: DeltaChannel) -> DeltaFollower:
    follower = DeltaFollower(channel, KEY.session_id, KEY.run_id)
    follower.expect(KEY.turn)
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
    follower = following(channel)
    await publish(channel, 1, ["He"])
    assert shown([await follower.poll()]) == [("He", False)]
    await publish(channel, 1, ["He", "Hell"], first=2)
    assert shown([await follower.poll()]) == [("Hell", False)]
    await publish(channel, 1, ["He", "Hell", "Hello", "Hello w"], first=4)  # seq 3 was lost
    assert await follower.poll() is None  # never past a hole
    await publish(channel, 2, ["Hi", "Hi there"])
    # read together, the retried attempt's deltas are one update, which starts the reply over
    [update] = shown([await follower.poll()])
    assert update == ("Hi there", True)
    # a zombie attempt writing on gets ignored
    await publish(channel, 1, ["He", "Hell", "Hello", "Hello w", "Hello wo"], first=5)
    assert await follower.poll() is None
    assert shown(await follower.finish(text("Hi there!"))) == [("Hi there!", False)]
    assert follower.turn is None


async def test_deltas_read_together_are_one_update_adding_their_text(
    channel: DeltaChannel,
) -> None:
    follower = following(channel)
    await publish(channel, 1, ["Hel", "Hello", "Hello, w"])
    [update] = [await follower.poll()]
    assert update is not None and update.delta == "Hello, w" and not update.restart
    await publish(channel, 1, ["Hel", "Hello", "Hello, w", "Hello, wor", "Hello, world"], first=4)
    update = await follower.poll()
    assert update is not None and update.delta == "orld" and update.message is not None
    assert update.message.text() == "Hello, world"


async def test_a_late_reader_starts_at_the_latest_attempt(channel: DeltaChannel) -> None:
    await publish(channel, 1, ["x", "xy", "xyz"])
    await publish(channel, 3, ["a", "ab"])
    follower = following(channel)
    assert shown([await follower.poll()]) == [("ab", False)]


async def test_the_stored_message_wins_at_the_receipt(channel: DeltaChannel) -> None:
    follower = following(channel)
    await publish(channel, 2, ["Hi", "Hi the"])
    assert await follower.poll() is not None
    # the stored reply is another attempt's (a zombie won the commit): one restart to it
    assert shown(await follower.finish(text("Hello"))) == [("Hello", True)]
    # the drained tail arrives before the receipt; nothing more when the shown text is stored
    follower = following(channel)
    await channel.clear(KEY)
    await publish(channel, 1, ["Al"])
    assert await follower.poll() is not None
    await publish(channel, 1, ["Al", "All"], first=2)
    assert shown(await follower.finish(text("All"))) == [("All", False)]


async def test_a_reply_stored_before_the_reader_looked_gets_no_deltas(
    channel: DeltaChannel,
) -> None:
    await publish(channel, 1, ["x", "xy"])
    follower = following(channel)
    assert await follower.finish(text("xy")) == []


async def test_a_receipt_after_a_finished_reply_gets_no_update_of_that_reply(
    channel: DeltaChannel,
) -> None:
    """A run stream that read a reply's deltas may read that reply's receipt and the next
    reply's together (a reader late to the store, a tool quick to answer): the next reply,
    whose deltas it never read, gets no update, not a ``restart`` from the finished reply's
    text to its own: a server sent that on as a ``delta`` frame, an empty one for a tool call
    (a reply with no text to show), and the run stream's reader saw the reply start over."""
    follower = following(channel)
    await publish(channel, 1, ["Let me", "Let me look"])
    assert shown([await follower.poll()]) == [("Let me look", False)]
    assert await follower.finish(text("Let me look")) == []
    assert await follower.finish(text("")) == []  # the next reply: a tool call, no text
    assert await follower.finish(text("It is sunny")) == []


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


@pytest.fixture(params=["memory", "file"])
async def writer_channel(request: pytest.FixtureRequest, tmp_path: Path) -> DeltaChannel:
    """A channel a writer awaits (memory, as MongoStore's) and one it writes inline (files)."""
    if request.param == "memory":
        channel: DeltaChannel = MemoryDeltas()
        assert not isinstance(channel, ImmediateChannel)
        return channel
    store = FileStore(tmp_path)
    for session_id in (KEY.session_id, "s"):  # the sessions the writer tests stream to
        await store.create_session(session_id)
    channel = store.live_deltas()
    assert isinstance(channel, ImmediateChannel)
    return channel


async def test_the_writer_batches_and_publishes_the_whole_reply(
    writer_channel: DeltaChannel,
) -> None:
    channel = writer_channel
    writer = DeltaWriter(channel, KEY, 1, every=0.05)
    final = ""
    clock = asyncio.get_running_loop().time
    began = clock()
    for i in range(100):  # 100 tokens in about 0.2 s (longer on a loaded machine)
        final += f"t{i} "
        writer.offer(text(final))
        await asyncio.sleep(0.002)
    elapsed = clock() - began
    await writer.finish(text(final))
    deltas = await channel.read(KEY)
    # one write at once, then at most one per interval, then the final one
    assert 2 <= len(deltas) <= min(2 + elapsed / 0.05, 50), (len(deltas), elapsed)
    assert [d.seq for d in deltas] == list(range(1, len(deltas) + 1))
    assert [d.final for d in deltas] == [False] * (len(deltas) - 1) + [True]
    follower = following(channel)
    assert shown([await follower.poll()])[-1] == (final, False)


async def test_what_a_paused_model_left_is_written_within_two_intervals(
    writer_channel: DeltaChannel,
) -> None:
    """Writes go out from the offers that find one due; a model that pauses does not leave its
    last partial unwritten: a timer writes it two intervals after the last write."""
    channel = writer_channel
    writer = DeltaWriter(channel, KEY, 1, every=0.5)
    clock = asyncio.get_running_loop().time
    writer.offer(text("a"))  # written at once
    written = clock()
    await asyncio.sleep(0)
    writer.offer(text("ab"))  # not due yet; then the model pauses
    await asyncio.sleep(0)
    seqs = [d.seq for d in await channel.read(KEY)]
    if clock() - written < 0.5:  # (a loop stalled for an interval would make it due)
        assert seqs == [1]

    async def caught_up() -> bool:
        return len(await channel.read(KEY)) == 2

    await eventually(caught_up, within=5.0, interval=0.01, what="the paused partial")
    assert clock() - written >= 0.5
    follower = following(channel)
    assert shown([await follower.poll()]) == [("ab", False)]
    writer.stop()


class _FailingFiles(FileDeltas):
    def __init__(self, root: Path, fail_at: int) -> None:
        super().__init__(root)
        self.fail_at = fail_at
        self.calls = 0

    def publish_now(self, key: DeltaKey, delta: Delta) -> None:
        self.calls += 1
        if self.calls == self.fail_at:
            raise OSError("disk full")
        super().publish_now(key, delta)


@pytest.mark.parametrize("kind", ["awaited", "inline"])
async def test_a_failed_write_stops_the_attempt_without_a_hole(kind: str, tmp_path: Path) -> None:
    channel: DeltaChannel = (
        _Failing(fail_at=2) if kind == "awaited" else _FailingFiles(tmp_path, fail_at=2)
    )
    await FileStore(tmp_path).create_session(KEY.session_id)
    writer = DeltaWriter(channel, KEY, 1, every=0.0)
    for t in ["a", "ab", "abc"]:
        writer.offer(text(t))
        await asyncio.sleep(0.01)
    await writer.finish(text("abcd"))
    assert [d.seq for d in await channel.read(KEY)] == [1]
    follower = following(channel)
    assert shown([await follower.poll()]) == [("a", False)]
    assert shown(await follower.finish(text("abcd"))) == [("abcd", False)]


async def test_a_partial_with_no_json_form_stops_the_attempt_and_raises_nothing(
    writer_channel: DeltaChannel,
) -> None:
    """A reply growing arguments nested deeper than the JSON encoder goes cannot be written as
    a delta: the writer stops as after a failed write, and neither its offer (inline, inside
    the model's stream) nor its task nor ``finish`` raises the encoder's error: the call that
    streams it fails as the store refuses the reply, not as a broken model stream."""
    from durable_agent.ai.messages import ToolCall

    nested: list[object] = []
    for _ in range(300):
        nested = [nested]
    deep = Message(
        role="assistant",
        content=[TextContent(text="a"), ToolCall(id="c", name="t", arguments={"n": nested})],
    )
    writer = DeltaWriter(writer_channel, KEY, 1, every=0.0)
    writer.offer(text("a"))

    async def written() -> bool:
        return [d.seq for d in await writer_channel.read(KEY)] == [1]

    await eventually(written, within=5, interval=0.001, what="the first delta")
    writer.offer(deep)
    await asyncio.sleep(0)  # one loop step: a write task (the channel's, if not inline) starts
    await writer.finish(deep)
    assert [d.seq for d in await writer_channel.read(KEY)] == [1]
    assert shown([await following(writer_channel).poll()]) == [("a", False)]


async def test_a_tool_call_growing_or_getting_its_id_is_no_restart() -> None:
    from durable_agent.ai.messages import ToolCall

    channel = MemoryDeltas()
    follower = following(channel)
    partial = Message(
        role="assistant",
        content=[TextContent(text="Let me"), ToolCall(id="", name="f", arguments={})],
    )
    patch = diff_parts(parts(None), parts(partial))
    assert patch is not None
    await channel.publish(KEY, Delta(attempt=1, seq=1, head=patch[0], size=patch[1], ops=patch[2]))
    assert await follower.poll() is not None
    stored = Message(
        role="assistant",
        content=[
            TextContent(text="Let me see"),
            ToolCall(id="call_1", name="f", arguments={"a": 1}),
        ],
    )
    [update] = await follower.finish(stored)
    assert update.message == stored and update.delta == " see"
    assert not update.restart
    # another call (or a rewritten text) is a restart
    follower = following(channel)
    assert await follower.poll() is not None
    other = stored.model_copy(update={"content": [TextContent(text="No"), *stored.content[1:]]})
    [update] = await follower.finish(other)
    assert update.restart and update.delta == "No"


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
        DeltaKey("ghost", "run", 0),
    )
    for key in (stale, fresh):
        await worker.live_deltas().publish(key, delta(1, 1, "", "partial"))
    await worker.delete_session("ghost")
    # what a worker leaves of a deleted session: a cancel note (a reply's delta is refused)
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


async def test_a_reader_reads_just_after_the_writers_next_write() -> None:
    """Each delta carries when it was written; the reader's next read is due just after the
    writer's next write (``FAST_POLL`` later, plus the lag), whenever it read this one, and no
    clock skew moves it outside ``[lag, FAST_POLL + lag]``; a read that finds nothing looks again
    soon, then backs off."""
    from durable_agent.durable.follow import FAST_POLL, MISSED_POLL, WRITE_LAG, next_write_in

    channel = MemoryDeltas()
    writer = DeltaWriter(channel, KEY, 1)
    before = time.time()
    writer.offer(text("a"))  # written at once
    await eventually(lambda: channel.read(KEY), within=5, interval=0.01, what="the first write")
    at = (await channel.read(KEY))[0].at
    assert at is not None and before <= at <= time.time()
    follower = following(channel)
    assert shown([await follower.poll()]) == [("a", False)]
    due = follower.due_in()
    assert FAST_POLL + WRITE_LAG - 0.1 <= due <= FAST_POLL + WRITE_LAG + 1e-6  # in step
    assert await follower.poll() is None
    assert follower.due_in() == pytest.approx(MISSED_POLL, abs=0.05)
    now = time.time()
    assert next_write_in(None) == FAST_POLL
    assert next_write_in(now - 60) == WRITE_LAG  # a reader far behind, or its clock ahead
    assert next_write_in(now + 60) == FAST_POLL + WRITE_LAG  # its clock behind the writer's
    writer.stop()


async def test_a_file_reader_reads_on_from_where_it_read_until_the_path_names_another_file(
    tmp_path: Path,
) -> None:
    """A FileStore reader keeps the side file it reads open and reads on from where it read
    (each line once); once the file is cleared (by another store object, as a worker clears it)
    it reads nothing, and a file written anew under the same key is read from its start."""
    worker, reader = FileStore(tmp_path).live_deltas(), FileStore(tmp_path).live_deltas()
    await FileStore(tmp_path).create_session(KEY.session_id)
    await publish(worker, 1, ["a", "ab"])
    assert [d.seq for d in reader.read_now(KEY)] == [1, 2]
    assert reader.read_now(KEY, (1, 2)) == []
    await publish(worker, 1, ["a", "ab", "abc"], first=3)
    assert [d.seq for d in reader.read_now(KEY, (1, 2))] == [3]
    assert [d.seq for d in reader.read_now(KEY, (1, 1))] == [2, 3]  # behind its mark: anew
    await worker.clear(KEY)
    assert reader.read_now(KEY, (1, 3)) == []
    await publish(worker, 2, ["x"])
    assert [(d.attempt, d.seq) for d in reader.read_now(KEY, (1, 3))] == [(2, 1)]


async def test_a_file_reader_reads_nothing_of_a_session_another_process_deleted(
    tmp_path: Path,
) -> None:
    """Lines written to a side file the reader keeps open, then the session deleted by another
    store object (another process): the reader returns none of them and lets the file go."""
    worker_store, reader = FileStore(tmp_path), FileStore(tmp_path).live_deltas()
    await worker_store.create_session(KEY.session_id)
    worker = worker_store.live_deltas()
    await publish(worker, 1, ["a"])
    assert [d.seq for d in reader.read_now(KEY)] == [1]
    await publish(worker, 1, ["a", "ab"], first=2)  # written, not yet read ...
    await worker_store.delete_session(KEY.session_id)  # ... and deleted
    assert reader.read_now(KEY, (1, 1)) == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors")
async def test_a_file_reader_keeps_few_files_open(tmp_path: Path) -> None:
    """However many replies one store object followed, it holds a bounded number of side files
    open, and none of a cleared reply or a deleted session."""
    store = FileStore(tmp_path)
    channel = store.live_deltas()
    await store.create_session("s1")
    opened = len(os.listdir("/proc/self/fd"))
    keys = [DeltaKey("s1", "run1", turn) for turn in range(1, 101)]
    for key in keys:
        await channel.publish(key, delta(1, 1, "", "hi"))
        assert len(channel.read_now(key)) == 1
    assert len(os.listdir("/proc/self/fd")) - opened <= 32
    await channel.clear(keys[-1])
    await store.delete_session("s1")
    assert len(os.listdir("/proc/self/fd")) == opened


async def test_a_slower_writer_names_its_pace_and_its_reader_keeps_it() -> None:
    """A worker may write a reply less often (``live_every``): each delta names the writer's
    pace, the reader's next read is due just after the writer's next write at that pace, and
    the reply counts as streaming until a write at that pace is overdue (no store read in
    between); a writer at the default pace names it too."""
    from durable_agent.durable.follow import IDLE_MARGIN, WRITE_LAG, next_write_in

    channel = MemoryDeltas()
    writer = DeltaWriter(channel, KEY, 1, every=1.5)
    writer.offer(text("a"))  # written at once
    await eventually(lambda: channel.read(KEY), within=5, interval=0.01, what="the first write")
    assert [d.every for d in await channel.read(KEY)] == [1.5]
    follower = following(channel)
    assert shown([await follower.poll()]) == [("a", False)]
    assert 1.5 + WRITE_LAG - 0.1 <= follower.due_in() <= 1.5 + WRITE_LAG + 1e-6
    await asyncio.sleep(WRITE_EVERY + IDLE_MARGIN + 0.05)  # the time: idle at the default pace
    assert follower.busy, "at its writer's pace the next write is not due yet"
    now = time.time()
    assert next_write_in(now, 1.5) == pytest.approx(1.5 + WRITE_LAG, abs=0.05)
    assert next_write_in(None, 1.5) == 1.5
    for damaged in (0.0, -1.0, 1e9, float("nan")):  # a pace no worker can have: the default
        assert next_write_in(None, damaged) == WRITE_EVERY
    writer.stop()
    default = DeltaWriter(channel, DeltaKey("s", "r", 2), 1)
    default.offer(text("b"))
    await eventually(
        lambda: channel.read(DeltaKey("s", "r", 2)), within=5, interval=0.01, what="a write"
    )
    assert [d.every for d in await channel.read(DeltaKey("s", "r", 2))] == [WRITE_EVERY]
    default.stop()


def _open_side_files(root: Path) -> int:
    """How many descriptors of this process name a side file under ``root``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(f"{root}/")
        except OSError:
            continue  # the listing's own descriptor, closed since
    return count


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
async def test_a_file_channel_closes_what_it_read_when_it_goes(tmp_path: Path) -> None:
    """A reader keeps the side file it reads open; a store object dropped (one per request in
    a web app) closes them: they stayed open for the life of the process, a descriptor per
    reply followed, the reply's file long deleted."""
    import gc

    writer = FileStore(tmp_path).live_deltas()
    await FileStore(tmp_path).create_session("s1")
    for turn in range(1, 4):
        await writer.publish(DeltaKey("s1", "r1", turn), delta(1, 1, "", "partial"))
    reader = FileStore(tmp_path)
    for turn in range(1, 4):
        assert await reader.live_deltas().read(DeltaKey("s1", "r1", turn))
    for turn in range(1, 4):
        await writer.clear(DeltaKey("s1", "r1", turn))  # the worker, once the reply is stored
    assert _open_side_files(tmp_path) == 3
    del reader
    gc.collect()
    assert _open_side_files(tmp_path) == 0


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
async def test_a_file_reader_keeps_no_side_file_of_a_session_another_process_deleted_open(
    tmp_path: Path,
) -> None:
    """A long-lived reader (a server's store object) followed replies of a session that another
    process (``sessions rm``) deleted: it holds none of their side files open, whose text a
    descriptor keeps on disk and readable (under ``/proc``) however long the reader lives. A
    reply read to its ``final`` delta lets its file go at once; one cut short by the delete, as
    soon as the reader opens another file. The reader held both until its 32 marks were spent."""
    reader = FileStore(tmp_path).live_deltas()
    other = FileStore(tmp_path)
    await other.create_session("s1")
    writer = other.live_deltas()
    done, cut = DeltaKey("s1", "r1", 1), DeltaKey("s1", "r1", 2)
    await writer.publish(done, delta(1, 1, "", "a secret"))
    await writer.publish(
        done, delta(1, 2, "a secret", "a secret reply").model_copy(update={"final": True})
    )
    await writer.publish(cut, delta(1, 1, "", "another secret"))
    assert [d.seq for d in reader.read_now(done)] == [1, 2]
    assert [d.seq for d in reader.read_now(cut)] == [1]
    await other.delete_session("s1")  # another process: the reader is not told
    assert _open_side_files(tmp_path) <= 1, "the reply read to its end is still open"
    await other.create_session("s2")
    await writer.publish(DeltaKey("s2", "r2", 1), delta(1, 1, "", "hello"))
    assert reader.read_now(DeltaKey("s2", "r2", 1))
    assert _open_side_files(tmp_path / "s1.live") == 0, "the reply cut short is still open"
    assert _open_side_files(tmp_path) == 1  # the reply followed now
