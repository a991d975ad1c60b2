"""A subclass of a built-in store that overrides ``append_entries`` (to count, log or refuse
writes) sees every write: the guarded append it inherits would go around its override, so such
a subclass is a plain store, unguarded (docs/design.md#store-contract). So is one that overrides
``load_entries_after`` alone, for its last-entry read: the override sees that read too."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from durable_agent import PersistError
from durable_agent.session import Entry, GuardedStore, LastEntryStore, StoreUnavailableError
from durable_agent.session.store import last_entry
from durable_agent.stores import FileStore, MemoryStore
from tests.support.conformance import msg
from tests.support.handles import stored_texts, texts
from tests.support.harness import LocalHarness


class CountingMemory(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.appended: list[list[str]] = []

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        self.appended.append([e.id for e in entries])
        await super().append_entries(session_id, entries)


class RefusingFile(FileStore):
    """Refuses every write once ``refuse`` is set, as a store whose quota is used up would."""

    refuse = False

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if self.refuse:
            raise StoreUnavailableError("quota used up")
        await super().append_entries(session_id, entries)


class GuardedCounting(CountingMemory):
    """Overrides both: the guarded append stays, and is this class's own."""

    async def append_if_last(
        self, session_id: str, entries: Sequence[Entry], last_id: str | None
    ) -> bool:
        self.appended.append([e.id for e in entries])
        return await super().append_if_last(session_id, entries, last_id)


def test_only_a_subclass_that_overrides_both_appends_stays_guarded(tmp_path: Path) -> None:
    assert isinstance(MemoryStore(), GuardedStore)
    assert isinstance(FileStore(tmp_path), GuardedStore)
    assert not isinstance(CountingMemory(), GuardedStore)
    assert not isinstance(RefusingFile(tmp_path), GuardedStore)
    assert isinstance(GuardedCounting(), GuardedStore)


async def test_a_busy_checked_run_and_a_fork_write_through_the_override() -> None:
    store = CountingMemory()
    agent = await LocalHarness().open(["hello"], store=store, session_id="s")
    await (await agent.run("hi", if_unchanged=True)).wait()
    child = await agent.fork("child")
    stored = {e.id for e in await store.load_entries("s")} | {
        e.id for e in await store.load_entries("child")
    }
    assert {i for batch in store.appended for i in batch} == stored
    assert texts(child.messages()) == ["hi", "hello"]


async def test_a_refusing_override_refuses_a_busy_checked_run_and_a_fork(tmp_path: Path) -> None:
    store = RefusingFile(tmp_path)
    agent = await LocalHarness().open(["hello"], store=store, session_id="s")
    await (await agent.run("hi")).wait()
    store.refuse = True
    with pytest.raises(PersistError, match="persist input: quota used up"):
        await (await agent.run("again", if_unchanged=True)).wait()
    with pytest.raises(StoreUnavailableError, match="quota"):
        await agent.fork("child")
    assert stored_texts(await store.load_entries("s")) == ["hi", "hello"]
    assert await store.load_entries("child") == []


class FailingSeqRead(MemoryStore):
    """A seq read that fails, as a store down for reads would (a test's outage)."""

    async def load_entries_after(
        self, session_id: str, after: int, limit: int | None = None
    ) -> list[tuple[int, Entry]]:
        raise StoreUnavailableError("reads are down")


async def test_a_seq_read_override_sees_the_last_entry_read() -> None:
    store = FailingSeqRead()
    await store.create_session("s")
    await store.append_entries("s", [msg("a")])
    assert isinstance(MemoryStore(), LastEntryStore)
    assert not isinstance(store, LastEntryStore)
    with pytest.raises(StoreUnavailableError, match="reads are down"):
        await last_entry(store, "s")
