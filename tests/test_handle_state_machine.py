"""One handle under interleaved run / append / branch / cancel, as a hypothesis state machine
(issue 11, "Done means").

The handle works on a real FileStore behind :class:`Faults`, which can hold a chosen write open
after it reached the store (a slow ``fsync``) or fail it before anything is written. Steps start
runs that complete, are cancelled inside a held commit or mid-stream, or fail on a write; appends
that complete, fail or are cancelled inside their commit; runs started while an append holds the
lock; branches anywhere. After every step:

- the handle's log equals the store's log (nothing stored behind its back, nothing it lacks);
- on no root-to-leaf path do two entries answer the same tool call;
- every receipt (run events, ``append`` copies) names a stored entry with the stored content;
- the handle is idle again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from durable_agent import (
    Agent,
    Event,
    MessageEntry,
    PersistError,
    RunCancelledError,
    RunStream,
    StoreUnavailableError,
    model,
    new,
)
from durable_agent.ai import ModelRequest, Reply, ScriptedModel, tool
from durable_agent.session import Entry, RetentionStore, SessionRecord, encode_entry
from durable_agent.stores import FileStore

T = TypeVar("T")
SESSION = "machine"
ROLES = ("user", "assistant", "tool_result")

Predicate = Callable[[Sequence[Entry]], bool]


def with_role(role: str) -> Predicate:
    def match(entries: Sequence[Entry]) -> bool:
        return any(isinstance(e, MessageEntry) and e.message.role == role for e in entries)

    return match


@dataclass
class Hold:
    """One held write: ``entered`` once it is in the store, returns after ``release``."""

    entered: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


class Faults:
    """A real store whose next matching append is held open or fails before writing."""

    def __init__(self, inner: RetentionStore) -> None:
        self.inner = inner
        self._hold: tuple[Predicate, Hold] | None = None
        self._fail: Predicate | None = None
        self._writes: set[asyncio.Task[None]] = set()

    def hold(self, predicate: Predicate) -> Hold:
        hold = Hold()
        self._hold = (predicate, hold)
        return hold

    def fail(self, predicate: Predicate) -> None:
        self._fail = predicate

    def disarm(self) -> None:
        self._hold = None
        self._fail = None

    async def create_session(self, session_id: str, parent_id: str | None = None) -> SessionRecord:
        return await self.inner.create_session(session_id, parent_id)

    async def load_session(self, session_id: str) -> SessionRecord:
        return await self.inner.load_session(session_id)

    async def load_entries(self, session_id: str) -> list[Entry]:
        return await self.inner.load_entries(session_id)

    async def append_entries(self, session_id: str, entries: Sequence[Entry]) -> None:
        if self._fail is not None and self._fail(entries):
            self._fail = None
            raise StoreUnavailableError("injected: the disk went away")
        if self._hold is not None and self._hold[0](entries):
            hold = self._hold[1]
            self._hold = None
            write = asyncio.ensure_future(self._slow(session_id, list(entries), hold))
            self._writes.add(write)
            write.add_done_callback(self._writes.discard)
            await asyncio.shield(write)  # a started write finishes (SPEC §2.1)
            return
        await self.inner.append_entries(session_id, entries)

    async def _slow(self, session_id: str, entries: list[Entry], hold: Hold) -> None:
        await self.inner.append_entries(session_id, entries)
        hold.entered.set()
        await hold.release.wait()


@tool
async def echo(text: str) -> str:
    """Echo the text."""
    return f"echo: {text}"


async def read_all(stream: RunStream, receipts: list[Entry]) -> BaseException | None:
    """Consume the stream, keeping every receipt; the run's failure, if any."""
    try:
        async for event in stream.events():
            receipts.extend(_receipt(event))
    except (RunCancelledError, PersistError) as exc:
        return exc
    return None


def _receipt(event: Event) -> list[Entry]:
    return list(event.entries or [])


async def first_of(*aws: Awaitable[Any]) -> int:
    """Index of the first of ``aws`` to finish; the others are cancelled."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return next(i for i, t in enumerate(tasks) if t in done)


class HandleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.runner = asyncio.Runner()
        self.tmp = tempfile.TemporaryDirectory()
        self.faults = Faults(FileStore(Path(self.tmp.name), fsync=False))
        self.script: deque[Reply] = deque()
        self.call_ids = itertools.count(1)
        self.receipts: list[Entry] = []
        self.agent: Agent = self.run(
            new(
                model(ScriptedModel(self._respond)),
                store=self.faults,
                session_id=SESSION,
                tools=(echo,),
            )
        )

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)

    def teardown(self) -> None:
        self.runner.close()
        self.tmp.cleanup()

    def _respond(self, request: ModelRequest) -> Reply:
        return self.script.popleft() if self.script else Reply(text="ok")

    def _queue_turns(self, with_tool: bool, streamed: bool) -> None:
        self.script.clear()
        if with_tool:
            call_id = f"call-{next(self.call_ids)}"
            self.script.append(Reply.call("echo", {"text": call_id}, id=call_id))
        delay = 0.002 if streamed else 0.0
        self.script.append(Reply(text="the answer, in a few chunks", chunk_delay=delay))

    # -- rules -------------------------------------------------------------------------------

    @rule(with_tool=st.booleans())
    def run_to_the_end(self, with_tool: bool) -> None:
        self._queue_turns(with_tool, streamed=False)
        stream = self.run(self.agent.run("question"))
        assert self.run(read_all(stream, self.receipts)) is None

    @rule(with_tool=st.booleans(), role=st.sampled_from(ROLES))
    def cancel_inside_a_commit(self, with_tool: bool, role: str) -> None:
        self._queue_turns(with_tool, streamed=False)
        hold = self.faults.hold(with_role(role))

        async def scenario() -> None:
            stream = await self.agent.run("question")
            reading = asyncio.ensure_future(read_all(stream, self.receipts))
            held = await first_of(hold.entered.wait(), asyncio.shield(reading)) == 0
            event(f"cancel inside the {role} commit" if held else f"no {role} commit to hold")
            if held:
                cancelling = asyncio.ensure_future(stream.cancel())
                asyncio.get_running_loop().call_soon(hold.release.set)  # after the cancel
                await cancelling
            self.faults.disarm()
            hold.release.set()
            await reading

        self.run(scenario())

    @rule(with_tool=st.booleans())
    def cancel_mid_stream(self, with_tool: bool) -> None:
        self._queue_turns(with_tool, streamed=True)

        async def scenario() -> None:
            stream = await self.agent.run("question")
            async for seen in stream.events():
                self.receipts.extend(_receipt(seen))
                if seen.agent is not None and seen.agent.type == "message_update":
                    await stream.cancel()
                    break
            with contextlib.suppress(RunCancelledError):  # unless it completed first
                await stream.wait()

        self.run(scenario())

    @rule(with_tool=st.booleans(), role=st.sampled_from(ROLES))
    def a_write_fails_mid_run(self, with_tool: bool, role: str) -> None:
        self._queue_turns(with_tool, streamed=False)
        self.faults.fail(with_role(role))
        stream = self.run(self.agent.run("question"))
        failure = self.run(read_all(stream, self.receipts))
        assert failure is None or isinstance(failure, PersistError)
        self.faults.disarm()

    @rule(fails=st.booleans())
    def append(self, fails: bool) -> None:
        if fails:
            self.faults.fail(with_role("user"))
        try:
            self.receipts += self.run(self.agent.append("noted"))
            assert not fails
        except StoreUnavailableError:
            assert fails

    @rule()
    def cancel_inside_an_append(self) -> None:
        hold = self.faults.hold(with_role("user"))

        async def scenario() -> None:
            appending = asyncio.ensure_future(self.agent.append("noted"))
            await hold.entered.wait()
            appending.cancel()
            hold.release.set()
            with contextlib.suppress(asyncio.CancelledError):  # applied, then cancelled
                self.receipts.extend(await appending)

        self.run(scenario())

    @rule(branch_first=st.booleans(), data=st.data())
    def run_while_an_append_commits(self, branch_first: bool, data: st.DataObject) -> None:
        self._queue_turns(False, streamed=False)
        target = data.draw(st.sampled_from(["", *(e.id for e in self.agent.entries())]))
        hold = self.faults.hold(with_role("user"))

        async def scenario() -> None:
            appending = asyncio.ensure_future(self.agent.append("noted"))
            await hold.entered.wait()
            branching = asyncio.ensure_future(self.agent.branch(target)) if branch_first else None
            starting = asyncio.ensure_future(self.agent.run("question"))
            hold.release.set()
            (appended,) = await appending
            self.receipts.append(appended)
            if branching is not None:
                await branching
            receipts: list[Entry] = []
            assert await read_all(await starting, receipts) is None
            self.receipts += receipts
            # the run started from the leaf as the append (and the branch) left it, or from
            # stored results answering that leaf's calls (run-start reconcile, issue 11.8b)
            expected = target if branch_first else appended.id
            by_id = {e.id: e for e in self.agent.entries()}
            start = receipts[0].parent_id or ""
            while start != expected:
                assert start in by_id, (
                    f"the run started at {receipts[0].parent_id}, off {expected!r}"
                )
                node = by_id[start]
                assert isinstance(node, MessageEntry) and node.message.role == "tool_result", (
                    f"the run started at {receipts[0].parent_id}, not at {expected!r}"
                )
                start = node.parent_id or ""

        self.run(scenario())

    @rule(data=st.data())
    def branch(self, data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(["", *(e.id for e in self.agent.entries())]))
        self.run(self.agent.branch(target))
        assert self.agent.leaf_id == target

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def handle_log_is_the_store_log(self) -> None:
        stored = self.run(self.faults.inner.load_entries(SESSION))
        assert [encode_entry(e) for e in self.agent.entries()] == [encode_entry(e) for e in stored]
        assert not self.agent.running

    @invariant()
    def no_tool_call_answered_twice_on_a_path(self) -> None:
        entries = self.agent.entries()
        by_id = {e.id: e for e in entries}
        parents = {e.parent_id for e in entries}
        for leaf in (e for e in entries if e.id not in parents):
            answered: set[str] = set()
            node: Entry | None = leaf
            while node is not None:
                if isinstance(node, MessageEntry) and node.message.role == "tool_result":
                    call_id = node.message.tool_call_id or ""
                    assert call_id not in answered, f"{call_id} answered twice on one path"
                    answered.add(call_id)
                node = by_id.get(node.parent_id or "")

    @invariant()
    def every_receipt_names_a_stored_entry(self) -> None:
        stored = {e.id: encode_entry(e) for e in self.run(self.faults.inner.load_entries(SESSION))}
        for entry in self.receipts:
            assert stored.get(entry.id) == encode_entry(entry), f"receipt {entry.id} not stored"


HandleMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_handle_state_machine = HandleMachine.TestCase
