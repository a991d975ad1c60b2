"""What waits for a person, read from the end of a session's log (``pending_in``, ``tail_turn``):
the same answer as the whole log gives (``pending_at_tail``), on every store, for a few entries'
read when the waiting turn is at the end."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import pytest

from durable_agent.ai import Message, TextContent, ToolCall
from durable_agent.server import create_app
from durable_agent.session import (
    ApprovalDecision,
    ApprovalRequest,
    Entry,
    MessageEntry,
    SessionNotFoundError,
    Store,
    pending_at_tail,
)
from durable_agent.session.approvals import TAIL_WINDOW, pending_in, tail_turn
from durable_agent.stores import FileStore, MemoryStore
from tests.server.test_paging import WholeReads
from tests.support.conformance import msg

SID = "s1"


@pytest.fixture(params=["memory", "file", "mongo"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "memory":
        yield MemoryStore()
    elif request.param == "file":
        yield FileStore(tmp_path / "s")
    else:
        from durable_agent.stores.mongo import MongoStore

        yield MongoStore(request.getfixturevalue("mongo_database"))


def reply(entry_id: str, parent: str, *calls: str) -> Entry:
    content = [ToolCall(id=c, name="send", arguments={"to": c}) for c in calls]
    message = Message(role="assistant", content=content or [TextContent(text="ok")])
    return MessageEntry(id=entry_id, parent_id=parent, message=message)


def result(entry_id: str, parent: str, call: str) -> Entry:
    message = Message(
        role="tool_result", content=[TextContent(text="done")], tool_call_id=call, tool_name="send"
    )
    return MessageEntry(id=entry_id, parent_id=parent, message=message)


def request(entry_id: str, parent: str, call: str) -> Entry:
    return ApprovalRequest(
        id=entry_id, parent_id=parent, tool_call_id=call, tool_name="send", args={}, run_id="r1"
    )


def decision(entry_id: str, parent: str, call: str) -> Entry:
    return ApprovalDecision(id=entry_id, parent_id=parent, tool_call_id=call, approved=True)


def history(n: int) -> list[Entry]:
    """``n`` questions and answers, chained."""
    out: list[Entry] = []
    for i in range(n):
        out.append(msg(f"u{i}", parent=out[-1].id if out else None))
        out.append(reply(f"a{i}", out[-1].id))
    return out


def waiting_turn(parent: str, calls: int, decided: int, tag: str = "") -> list[Entry]:
    """A reply with ``calls`` calls, each asking a person, the first ``decided`` decided
    (entry IDs prefixed with ``tag``)."""
    ids = [f"c{i}" for i in range(calls)]
    out = [reply(f"{tag}ask", parent, *ids)]
    for c in ids:
        out.append(request(f"{tag}q-{c}", out[-1].id, c))
    for c in ids[:decided]:
        out.append(decision(f"{tag}d-{c}", out[-1].id, c))
    return out


async def stored(store: Store, *batches: Sequence[Entry]) -> list[Entry]:
    await store.create_session(SID)
    for batch in batches:
        await store.append_entries(SID, list(batch))
    return [e for batch in batches for e in batch]


async def test_a_long_session_tells_what_waits_as_its_whole_log_does(store: Store) -> None:
    before = history(3 * TAIL_WINDOW)
    turn = waiting_turn(before[-1].id, calls=3, decided=1)
    log = await stored(store, before, turn)
    found = await pending_in(store, SID)
    assert [p.tool_call_id for p in found] == ["c1", "c2"]
    assert found == pending_at_tail(log)
    assert [e.id for _, e in await tail_turn(store, SID)] == [e.id for e in turn]
    numbered = [(seq, e.id) for seq, e in enumerate(log, 1)]
    assert [(seq, e.id) for seq, e in await tail_turn(store, SID)] == numbered[-len(turn) :]


async def test_a_turn_far_from_the_logs_end_is_read_through_the_walk(store: Store) -> None:
    """The active path's end is the last entry stored, but its turn may lie further back than
    the first window: a branch whose waiting turn was stored before a long sibling branch, then
    a decision appended to it last."""
    base = history(2)
    turn = waiting_turn(base[-1].id, calls=2, decided=0)
    sibling = [msg("x0", parent=base[-1].id)]
    for i in range(1, 5 * TAIL_WINDOW):
        sibling.append(msg(f"x{i}", parent=sibling[-1].id))
    last = [decision("d-c0", turn[-1].id, "c0")]
    log = await stored(store, base, turn, sibling, last)
    found = await pending_in(store, SID)
    assert [p.tool_call_id for p in found] == ["c1"]
    assert found == pending_at_tail(log)


@pytest.mark.parametrize("seed", range(6))
async def test_random_logs_agree_with_the_whole_log(store: Store, seed: int) -> None:
    """Logs of questions and answers, waiting turns (some on branches off older entries), some
    of their calls answered, more questions after some: each read both ways."""
    rng = random.Random(seed)
    log: list[Entry] = history(rng.randrange(1, 60))
    for t in range(rng.randrange(1, 4)):
        parent = rng.choice(log).id if rng.random() < 0.3 else log[-1].id
        calls = rng.randrange(1, 4)
        log += waiting_turn(parent, calls, decided=rng.randrange(0, calls + 1), tag=f"t{t}-")
        if rng.random() < 0.5:  # a call answered: what waits is the others
            log.append(result(f"t{t}-r", log[-1].id, "c0"))
        if rng.random() < 0.5:
            log += [msg(f"t{t}-u{i}", parent=log[-1].id) for i in range(rng.randrange(1, 80))]
    whole = await stored(store, log)
    assert await pending_in(store, SID) == pending_at_tail(whole)


async def test_an_empty_session_waits_for_nothing_and_a_missing_one_is_not_found(
    store: Store,
) -> None:
    await store.create_session(SID)
    assert await pending_in(store, SID) == []
    with pytest.raises(SessionNotFoundError):
        await pending_in(store, "nope")


async def long_waiting_session(root: Path) -> WholeReads:
    """A FileStore counting the entries its reads hand out, holding 1,000 entries, then a turn
    waiting for people on c0 and c1."""
    store = WholeReads(root)
    before = history(500)
    await stored(store, before, waiting_turn(before[-1].id, calls=2, decided=0))
    store.read = 0
    return store


async def test_a_waiting_turn_at_the_end_reads_a_window_not_the_session(tmp_path: Path) -> None:
    store = await long_waiting_session(tmp_path)
    assert [p.tool_call_id for p in await pending_in(store, SID)] == ["c0", "c1"]
    assert store.read <= TAIL_WINDOW + 1  # its last entry, then a window


async def test_the_approvals_route_reads_the_end_of_a_long_session(tmp_path: Path) -> None:
    """``GET .../approvals``, which a front end may poll, loaded the whole session (every entry
    decoded) on each request."""
    store = await long_waiting_session(tmp_path)
    transport = httpx.ASGITransport(app=create_app(store=store))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        r = await client.get(f"/v1/sessions/{SID}/approvals")
    assert r.status_code == 200, r.text
    assert [p["tool_call_id"] for p in r.json()["pending"]] == ["c0", "c1"]
    assert store.read <= TAIL_WINDOW + 1
