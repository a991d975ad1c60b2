"""A follower of a session deleted and created again under its ID
(docs/design.md#following-a-session): between two of its reads another process runs ``sessions
rm`` and a run start creates the session anew. The follower must not go on from its old cursor
into the new session's entries (spliced onto the old stream, with parents it never saw): it
raises ``SessionNotFoundError``, as for a delete it saw, and the HTTP stream sends ``deleted``
and ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from durable_agent.durable import follow
from durable_agent.durable.follow import SessionFollower
from durable_agent.server import create_app
from durable_agent.session import RetentionStore, SessionNotFoundError
from durable_agent.stores import FileStore, MemoryStore
from durable_agent.workflows import AgentSpec
from tests.server.support import scripted, serving, stream, tool_script
from tests.support.conformance import msg

SID = "s1"
Stores = tuple[RetentionStore, RetentionStore]
"""The follower's store object, and another process's on the same sessions."""


@pytest.fixture(params=["memory", "file", "mongo"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Stores]:
    if request.param == "memory":
        memory = MemoryStore()
        yield memory, memory
    elif request.param == "file":
        yield FileStore(tmp_path / "s"), FileStore(tmp_path / "s")
    else:
        from durable_agent.stores.mongo import MongoStore

        db = request.getfixturevalue("mongo_database")
        yield MongoStore(db), MongoStore(db)


def chain(*ids: str) -> list[Any]:
    """Entries each hanging off the one before (the first a root)."""
    return [msg(i, parent=p) for i, p in zip(ids, [None, *ids], strict=False)]


async def recreate(other: RetentionStore, entries: list[Any]) -> None:
    await other.delete_session(SID)
    await other.create_session(SID)
    await other.append_entries(SID, entries)


async def test_a_follower_raises_rather_than_splice_the_new_session_on(stores: Stores) -> None:
    mine, other = stores
    await mine.create_session(SID)
    await mine.append_entries(SID, chain("a", "b", "c"))
    follower = SessionFollower(mine, SID)
    assert [e.id for _, e in await follower.read()] == ["a", "b", "c"]
    await recreate(other, chain("w", "x", "y", "z"))
    with pytest.raises(SessionNotFoundError):
        await follower.read()  # not (4, "z"), whose parent "y" it never saw
    follower.close()


async def test_a_follower_notices_a_new_session_still_shorter_than_its_cursor(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is read past the cursor of a new session still shorter: its record, read now and
    then on reads that find nothing, tells (here at every such read)."""
    monkeypatch.setattr(follow, "CONFIRM_EVERY", 0.0, raising=False)
    mine, other = stores
    await mine.create_session(SID)
    await mine.append_entries(SID, chain("a", "b", "c"))
    follower = SessionFollower(mine, SID)
    await follower.read()
    await recreate(other, chain("x"))
    with pytest.raises(SessionNotFoundError):
        await follower.read()
    follower.close()


async def test_a_branch_off_an_entry_before_the_cursor_is_no_new_session(stores: Stores) -> None:
    """A follower that started mid-session reads entries whose parents it never saw (a run
    from the entry it started after, an edit branching off an older one): still the same
    session, each is yielded."""
    mine, other = stores
    await mine.create_session(SID)
    await mine.append_entries(SID, chain("a", "b", "c"))
    follower = SessionFollower(mine, SID, after=2)
    assert [e.id for _, e in await follower.read()] == ["c"]
    await other.append_entries(SID, [msg("d", parent="b"), msg("e", parent="a"), msg("f")])
    assert [e.id for _, e in await follower.read()] == ["d", "e", "f"]
    follower.close()


async def test_a_run_streams_follower_of_a_session_not_created_yet_sees_it_created(
    tmp_path: Path,
) -> None:
    """``missing_ok``: a session its run creates reads as empty until it is there, then its
    entries come, whoever created it."""
    mine, other = FileStore(tmp_path / "s"), FileStore(tmp_path / "s")
    follower = SessionFollower(mine, SID, missing_ok=True)
    assert await follower.read() == []
    await other.create_session(SID)
    await other.append_entries(SID, chain("a", "b"))
    assert [e.id for _, e in await follower.read()] == ["a", "b"]
    await other.append_entries(SID, [msg("c", parent="b")])
    assert [e.id for _, e in await follower.read()] == ["c"]


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_an_http_stream_of_a_session_created_again_elsewhere_says_deleted(
    tmp_path: Path, kind: str
) -> None:
    """Another replica deletes the session and a run start creates it again (no DELETE through
    this server, whose hub would know at once): the stream sends ``deleted`` and ends, and none
    of the new session's entries come on it."""
    memory = MemoryStore()
    stores: list[RetentionStore] = [memory, memory]
    if kind == "file":
        stores = [FileStore(tmp_path / "s"), FileStore(tmp_path / "s")]
    store, other = stores
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(tool_script()))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await store.create_session(SID)
        await store.append_entries(SID, chain("a", "b"))
        async with stream(client, SID, after=0) as reader:
            await reader.until(lambda r: r.last_seq() == 2)
            await recreate(other, chain("w", "x", "y", "z"))
            await reader.until(lambda r: any(f.event == "deleted" for f in r.frames))
        assert [s for s, _ in reader.entries()] == [1, 2]
        assert [f.event for f in reader.frames][-1] == "deleted"


async def test_a_stream_of_the_new_session_does_not_join_the_old_ones_hub(tmp_path: Path) -> None:
    """The session's hub still follows the deleted session (the new one is shorter than its
    cursor, so none of its reads tells yet) when a browser opens the new one: that stream
    gets the new session whole and live, not the old hub's cursor nor its ``deleted``; the old
    session's stream learns of the delete."""
    store, other = FileStore(tmp_path / "s"), FileStore(tmp_path / "s")
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(tool_script()))})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await store.create_session(SID)
        await store.append_entries(SID, chain("a", "b"))
        async with stream(client, SID, after=0) as old:
            await old.until(lambda r: r.live)
            await other.append_entries(SID, [msg("c", parent="b")])
            await old.until(lambda r: r.last_seq() == 3)  # the hub read the old session
            await recreate(other, chain("x"))
            async with stream(client, SID, after=0) as new:
                await new.until(lambda r: r.live)
                await other.append_entries(SID, [msg("y", parent="x")])
                await new.until(lambda r: r.last_seq() == 2)
                await old.until(lambda r: any(f.event == "deleted" for f in r.frames))
        assert [e["id"] for _, e in new.entries()] == ["x", "y"]
        assert not any(f.event == "deleted" for f in new.frames)
        assert [e["id"] for _, e in old.entries()] == ["a", "b", "c"]


async def test_a_follower_given_its_sessions_creation_reads_no_record_first(
    stores: Stores, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's stream starts its follower with the ``created_at`` its start has just read (for
    the run's memo): its first read reads no record again, and a session created again is
    still told from that one."""
    mine, other = stores
    record = await mine.create_session(SID)
    await mine.append_entries(SID, chain("a", "b", "c"))
    reads: list[str] = []
    load_session = mine.load_session

    async def counted(session_id: str) -> Any:
        reads.append(session_id)
        return await load_session(session_id)

    monkeypatch.setattr(mine, "load_session", counted)
    follower = SessionFollower(mine, SID, born=record.created_at)
    assert [e.id for _, e in await follower.read()] == ["a", "b", "c"]
    assert reads == []
    await recreate(other, chain("w", "x", "y", "z"))
    with pytest.raises(SessionNotFoundError):
        await follower.read()
    assert reads == [SID]
    follower.close()
