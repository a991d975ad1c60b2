"""A run started ``if_unchanged`` (what a server's and the CLI's busy-checked starts use): it
stores its input only if nothing was stored since its handle read the session, so two
processes starting runs at once, each having found the session idle, do not both run
(docs/design.md#http-api)."""

from __future__ import annotations

import asyncio

import pytest

from durable_agent import RunActiveError
from durable_agent.session import Store
from tests.support.handles import stored_texts, texts
from tests.support.harness import Harness


async def test_a_run_started_after_another_process_stored_fails_storing_nothing(
    harness: Harness, store: Store
) -> None:
    """``b`` read the session before ``a``'s run: its run ``if_unchanged`` fails with
    ``RunActiveError`` and stores nothing; ``b`` keeps its leaf. Started plainly, it grows a
    sibling branch as handles do; once it has read the session again, ``if_unchanged`` runs."""
    seed = await harness.open(["seed answer"], store=store, session_id="shared")
    await (await seed.run("seed question")).wait()
    a = await harness.open(["answer a"], store=store, session_id="shared")
    b = await harness.open(["answer b", "answer c"], store=store, session_id="shared")
    await (await a.run("question a")).wait()
    before = await store.load_entries("shared")
    stream = await b.run("question b", if_unchanged=True)
    with pytest.raises(RunActiveError, match="another run or decision stored on session"):
        await asyncio.wait_for(stream.wait(), 30)
    assert await store.load_entries("shared") == before
    assert b.leaf_id == seed.leaf_id
    await (await b.run("question b")).wait()
    siblings = [e for e in await store.load_entries("shared") if e.parent_id == seed.leaf_id]
    assert sorted(stored_texts(siblings)) == ["question a", "question b"]
    await (await b.run("question c", if_unchanged=True)).wait()
    assert texts(b.messages())[-2:] == ["question c", "answer c"]


async def test_a_run_started_if_unchanged_on_an_idle_session_runs(
    harness: Harness, store: Store
) -> None:
    """Nothing stored meanwhile, on a new session and on one with entries: the run runs."""
    agent = await harness.open(["one", "two"], store=store, session_id="idle")
    await (await agent.run("first", if_unchanged=True)).wait()
    await (await agent.run("second", if_unchanged=True)).wait()
    assert texts(agent.messages()) == ["first", "one", "second", "two"]
