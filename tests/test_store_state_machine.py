"""Several store objects on one backend under interleaved create / append / load / delete /
create-again, as a hypothesis state machine (docs/design.md#store-contract,
docs/design.md#retention).

Each backend (MemoryStore, FileStore, MongoStore on the test server) gets three store objects
sharing it, each with its own caches (Mongo's sequence floors and incarnations, FileStore's ID
index), as separate workers and clients would. Steps run one operation on one object, or race
an append against a delete or against another append on two objects. A model says what every
operation must return; after every step, every object loads every session and checks:

- load order = append order (a race between two appends may land either way round, each batch
  whole, and the model follows what landed);
- a deleted session's entries never load again (not through any object, not in the session
  created again under its ID: the entries' content names the incarnation that wrote them);
- every acknowledged append is loadable, unless its session was deleted;
- a deleted session leaves nothing behind in the backend.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import tempfile
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from durable_agent.ai import Message, TextContent
from durable_agent.session import (
    Entry,
    EntryConflictError,
    MessageEntry,
    RetentionStore,
    SessionExistsError,
    SessionNotFoundError,
    encode_entry,
)
from durable_agent.stores import FileStore, MemoryStore

T = TypeVar("T")
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
SESSIONS = ("s1", "s2")
IDS = ("a", "b", "c", "d", "e")
OBJECTS = 3


@dataclass
class Session:
    """What the model knows of one session ID: whether it exists, which incarnation it is, and
    its log (entry ID, wire) in append order."""

    exists: bool = False
    incarnation: int = 0
    log: list[tuple[str, str]] = field(default_factory=list)

    def plan(self, batch: Sequence[tuple[str, str]]) -> list[tuple[str, str]] | None:
        """What appending ``batch`` stores, or ``None`` for a conflict."""
        stored = dict(self.log)
        todo = []
        for eid, wire in batch:
            if eid in stored:
                if stored[eid] != wire:
                    return None
                continue
            stored[eid] = wire
            todo.append((eid, wire))
        return todo


class Backend:
    """A fresh backend and ``OBJECTS`` store objects on it, per example."""

    def __init__(self, kind: str, mongo: tuple[str, str] | None) -> None:
        self.kind = kind
        self.mongo = mongo
        self.prefix = f"m{secrets.token_hex(4)}-"  # Mongo examples share one database
        self.tmp: tempfile.TemporaryDirectory[str] | None = None
        self.clients: list[Any] = []

    def sid(self, name: str) -> str:
        return self.prefix + name

    async def open(self) -> list[RetentionStore]:
        if self.kind == "memory":
            store = MemoryStore()
            return [store] * OBJECTS
        if self.kind == "file":
            self.tmp = tempfile.TemporaryDirectory()
            return [FileStore(self.tmp.name, fsync=False) for _ in range(OBJECTS)]
        from pymongo import AsyncMongoClient

        from durable_agent.stores.mongo import MongoStore

        assert self.mongo is not None
        uri, name = self.mongo
        self.clients = [AsyncMongoClient(uri, tz_aware=True) for _ in range(2)]
        return [MongoStore(self.clients[n % 2][name]) for n in range(OBJECTS)]

    async def leftovers(self, sid: str) -> list[str]:
        """What the backend still holds of a session that is deleted (names of what is left)."""
        if self.kind == "file":
            assert self.tmp is not None
            return [n for n in os.listdir(self.tmp.name) if n.startswith(f"{sid}.")]
        if self.kind == "mongo":
            from durable_agent.stores.mongo.incarnation import id_range

            db = self.clients[0][self.mongo[1] if self.mongo else ""]
            left = []
            if await db.entries.count_documents({"session_id": sid}):
                left.append("entries")
            if await db.entries_claims.count_documents({"_id": id_range(sid)}):
                left.append("claims")
            return left
        return []

    async def close(self) -> None:
        for client in self.clients:
            await client.close()
        if self.tmp is not None:
            self.tmp.cleanup()


class StoreMachine(RuleBasedStateMachine):
    kind = "memory"
    mongo: tuple[str, str] | None = None

    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.backend = Backend(self.kind, self.mongo)
        self.stores = self.run(self.backend.open())
        self.model = {name: Session() for name in SESSIONS}
        self.incarnations = itertools.count(1)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    def teardown(self) -> None:
        self.run(self.backend.close())
        self.runner.close()

    def entries(self, name: str, ids: Sequence[str], variant: int) -> list[Entry]:
        """Entries whose content names the session's incarnation (and a variant, so an ID can be
        appended again with other content: a conflict)."""
        incarnation = self.model[name].incarnation
        return [
            MessageEntry(
                id=eid,
                created_at=T0,
                message=Message(
                    role="user",
                    content=[TextContent(text=f"{name} #{incarnation} {eid} v{variant}")],
                ),
            )
            for eid in ids
        ]

    # -- rules ----------------------------------------------------------------------------------

    @rule(obj=st.integers(0, OBJECTS - 1), name=st.sampled_from(SESSIONS))
    def create(self, obj: int, name: str) -> None:
        session = self.model[name]
        try:
            self.run(self.stores[obj].create_session(self.backend.sid(name)))
        except SessionExistsError:
            assert session.exists
            return
        assert not session.exists
        self.model[name] = Session(exists=True, incarnation=next(self.incarnations))

    @rule(
        obj=st.integers(0, OBJECTS - 1),
        name=st.sampled_from(SESSIONS),
        ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True),
        variant=st.integers(0, 1),
    )
    def append(self, obj: int, name: str, ids: list[str], variant: int) -> None:
        session = self.model[name]
        batch = self.entries(name, ids, variant)
        expected = session.plan([(e.id, encode_entry(e)) for e in batch])
        try:
            self.run(self.stores[obj].append_entries(self.backend.sid(name), batch))
        except SessionNotFoundError:
            assert not session.exists
            return
        except EntryConflictError:
            assert session.exists and expected is None
            return
        assert session.exists and expected is not None
        session.log += expected

    @rule(obj=st.integers(0, OBJECTS - 1), name=st.sampled_from(SESSIONS))
    def delete(self, obj: int, name: str) -> None:
        session = self.model[name]
        try:
            self.run(self.stores[obj].delete_session(self.backend.sid(name)))
        except SessionNotFoundError:
            assert not session.exists
            return
        assert session.exists
        self.model[name] = Session(incarnation=session.incarnation)

    @rule(
        writer=st.integers(0, OBJECTS - 1),
        deleter=st.integers(0, OBJECTS - 1),
        name=st.sampled_from(SESSIONS),
        ids=st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True),
        variant=st.integers(0, 1),
    )
    def append_races_a_delete(
        self, writer: int, deleter: int, name: str, ids: list[str], variant: int
    ) -> None:
        session = self.model[name]
        sid = self.backend.sid(name)
        batch = self.entries(name, ids, variant)

        async def race() -> tuple[BaseException | None, BaseException | None]:
            return await asyncio.gather(
                self.stores[writer].append_entries(sid, batch),
                self.stores[deleter].delete_session(sid),
                return_exceptions=True,
            )

        appended, deleted = self.run(race())
        event(f"append racing a delete: {type(appended).__name__}")
        if not session.exists:
            assert isinstance(appended, SessionNotFoundError), appended
            assert isinstance(deleted, SessionNotFoundError), deleted
            return
        assert deleted is None, deleted
        assert appended is None or isinstance(
            appended, SessionNotFoundError | EntryConflictError
        ), appended
        self.model[name] = Session(incarnation=session.incarnation)

    @rule(
        first=st.integers(0, OBJECTS - 1),
        second=st.integers(0, OBJECTS - 1),
        name=st.sampled_from(SESSIONS),
        ids=st.tuples(
            st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True),
            st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True),
        ),
        variants=st.tuples(st.integers(0, 1), st.integers(0, 1)),
    )
    def two_appends_race(
        self,
        first: int,
        second: int,
        name: str,
        ids: tuple[list[str], list[str]],
        variants: tuple[int, int],
    ) -> None:
        session = self.model[name]
        sid = self.backend.sid(name)
        batches = [self.entries(name, ids[n], variants[n]) for n in range(2)]

        async def race() -> tuple[BaseException | None, BaseException | None]:
            return await asyncio.gather(
                self.stores[first].append_entries(sid, batches[0]),
                self.stores[second].append_entries(sid, batches[1]),
                return_exceptions=True,
            )

        outcomes = self.run(race())
        event("two appends: " + " ".join(sorted(type(o).__name__ for o in outcomes)))
        if not session.exists:
            assert all(isinstance(o, SessionNotFoundError) for o in outcomes), outcomes
            return
        assert all(o is None or isinstance(o, EntryConflictError) for o in outcomes), outcomes
        wires = [[(e.id, encode_entry(e)) for e in batch] for batch in batches]
        loaded = [(e.id, encode_entry(e)) for e in self.run(self.stores[0].load_entries(sid))]
        allowed = []
        for order in ((0, 1), (1, 0)):
            trial = Session(exists=True, log=list(session.log))
            acked = []
            for n in order:
                todo = trial.plan(wires[n])
                acked.append(todo is not None)
                trial.log += todo or []
            if [acked[order.index(n)] for n in range(2)] == [o is None for o in outcomes]:
                allowed.append(trial.log)
        assert loaded in allowed, (outcomes, loaded, allowed)
        session.log = loaded

    # -- invariants -----------------------------------------------------------------------------

    @invariant()
    def every_object_loads_what_the_model_says(self) -> None:
        for name, session in self.model.items():
            sid = self.backend.sid(name)
            for store in self.stores:
                try:
                    loaded = self.run(store.load_entries(sid))
                except SessionNotFoundError:
                    assert not session.exists, f"{name}: acknowledged appends lost"
                    continue
                assert session.exists, f"{name} was deleted, yet loads"
                assert [(e.id, encode_entry(e)) for e in loaded] == session.log

    @invariant()
    def a_deleted_session_leaves_nothing(self) -> None:
        for name, session in self.model.items():
            if not session.exists:
                assert self.run(self.backend.leftovers(self.backend.sid(name))) == []


SETTINGS = settings(
    max_examples=int(os.environ.get("STORE_MACHINE_EXAMPLES", "25")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("kind", ["memory", "file", "mongo"])
def test_store_state_machine(kind: str, request: pytest.FixtureRequest) -> None:
    mongo = None
    if kind == "mongo":
        mongo = (request.getfixturevalue("mongo_uri"), f"da_machine_{secrets.token_hex(4)}")

    class Machine(StoreMachine):
        pass

    Machine.kind, Machine.mongo = kind, mongo
    try:
        run_state_machine_as_test(Machine, settings=SETTINGS)
    finally:
        if mongo is not None:
            from pymongo import MongoClient

            client: MongoClient[dict[str, Any]] = MongoClient(mongo[0])
            with client:
                client.drop_database(mongo[1])
