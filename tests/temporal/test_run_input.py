"""Run input from operators, on the real Temporal dev server.

- Any input problem fails the run workflow at once with a non-retryable ``InvalidRunInput``
  naming the field, before anything is stored; the workflow task never fails (Temporal would
  retry it forever, leaving the run Running and silent).
- The Start Workflow form of the Temporal UI can be filled in by hand: a plain
  ``{"session_id", "agent", "text"}`` object, or ``inputs`` as plain message objects, started
  here through a raw client with the default JSON converter (no project data converter).

The worker is configured as in production (no ``workflow_failure_exception_types``), so a
problem that failed the workflow task would show as a hang, bounded here by a timeout.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowFailureError, WorkflowQueryFailedError
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from durable_agent import MessageEntry, ScriptedModel, new
from durable_agent.session import SessionNotFoundError, Store
from durable_agent.stores import MemoryStore
from durable_agent.workflows import AgentSpec, create_worker, run_workflow_id
from durable_agent.workflows.run_input import (
    InvalidRunInputError,
    decode_run_input,
    input_entry,
)
from durable_agent.workflows.search import KIND_KEY, SESSION_ID_KEY
from tests.support.temporal import temporal_binary

from .helpers import event_types, eventually, executor, queue, sid

ENTRY_WITHOUT_HEADER = json.dumps(
    {"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": "hi"}]}}
)
"""An entry as one writes it by hand: no ``id``, no ``created_at``."""
NO_ARGUMENT: Any = object()


# -- decoding (no server) -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "field", "problem"),
    [
        ([1, 2], "", "expected a JSON object, got an array"),
        ({"agent": "a", "text": "hi"}, "session_id", "required"),
        ({"session_id": "s", "text": "hi"}, "agent", "required"),
        ({"session_id": "user 42", "agent": "a"}, "session_id", "invalid session ID"),
        ({"session_id": "s", "agent": ""}, "agent", "must name an agent"),
        ({"session_id": "s", "agent": "a", "txt": "hi"}, "txt", "unknown field"),
        ({"session_id": "s", "agent": "a", "text": 5}, "text", "must be a string"),
        (
            {"session_id": "s", "agent": "a", "inputs": [{"wire": ENTRY_WITHOUT_HEADER}]},
            "inputs[0].wire",
            "id must be a non-empty string",
        ),
        (
            {"session_id": "s", "agent": "a", "inputs": [{"role": "bot", "content": "x"}]},
            "inputs[0].role",
            "Input should be 'user', 'assistant' or 'tool_result'",
        ),
        (
            {
                "session_id": "s",
                "agent": "a",
                "inputs": [{"role": "user", "content": [{"type": "video"}]}],
            },
            "inputs[0].content[0]",
            "does not match any of the expected tags",
        ),
        ({"session_id": "s", "agent": "a", "options": {"max_turns": "3"}}, "options.max_turns", ""),
        # a typo in an option or a timeout did nothing, the run going on without it
        (
            {"session_id": "s", "agent": "a", "options": {"max_turn": 3}},
            "options.max_turn",
            "unknown",
        ),
        (
            {"session_id": "s", "agent": "a", "timeouts": {"model_start_to_clsoe": 5}},
            "timeouts.model_start_to_clsoe",
            "unknown field",
        ),
        ({"session_id": "s", "agent": "a", "leaf_id": 7}, "leaf_id", "string"),
        (
            {"session_id": "s", "agent": "a", "inputs": [{"role": "user", "contnet": "hi"}]},
            "inputs[0].contnet",
            "unknown field",
        ),
        ({"session_id": "s", "agent": "a", "inputs": [{"text": "hi"}]}, "inputs[0]", "needs"),
        ({"session_id": "s", "agent": "a", "inputs": ["hi"]}, "inputs[0]", "must be an object"),
        ({"session_id": "s", "agent": "a", "inputs": {"role": "user"}}, "inputs", "valid list"),
        (
            {"session_id": "s", "agent": "a", "timeouts": {"store_start_to_close": -1}},
            "timeouts.store_start_to_close",
            "greater than 0",
        ),
        (
            {"session_id": "s", "agent": "a", "timeouts": {"model_max_attempts": -1}},
            "timeouts.model_max_attempts",
            "0 (unlimited) or more",
        ),
        (
            {"session_id": "s", "agent": "a", "continue_as_new_after_turns": 0},
            "continue_as_new_after_turns",
            "at least 1",
        ),
        ({"session_id": "s", "agent": "a", "text": ""}, "text", "empty"),
        (
            {"session_id": "s", "agent": "a", "text": "hi", "options": {"max_turns": 0}},
            "options.max_turns",
            "at least 1",
        ),
        (
            {"session_id": "s", "agent": "a", "text": "hi", "options": {"max_turns": -1}},
            "options.max_turns",
            "at least 1",
        ),
        (
            {"session_id": "s", "agent": "a", "inputs": [{"role": "user", "content": ""}]},
            "inputs[0].content",
            "empty",
        ),
        (
            {"session_id": "s", "agent": "a", "inputs": [{"role": "user", "content": []}]},
            "inputs[0].content",
            "empty",
        ),
        ({"session_id": "s", "agent": "a", "inputs": [{"role": "user"}]}, "inputs[0].content", ""),
        ({"session_id": "s", "agent": "a", "leaf_id": ""}, "inputs", "nothing to answer"),
        # options the workflow itself reads: a wrong type failed its task (retried forever)
        (
            {"session_id": "s", "agent": "a", "options": {"approval_wait": "abc"}},
            "options.approval_wait",
            "a number of seconds",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"approval_wait": -5}},
            "options.approval_wait",
            "0 or more",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"model_retry": "x"}},
            "options.model_retry",
            "an object",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"model_retry": {"max_attempts": "abc"}}},
            "options.model_retry.max_attempts",
            "an integer",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"model_retry": {"max_attempts": -1}}},
            "options.model_retry.max_attempts",
            "0 (unlimited) or more",
        ),
        (
            {
                "session_id": "s",
                "agent": "a",
                "options": {"model_retry": {"initial_interval": "1s"}},
            },
            "options.model_retry.initial_interval",
            "a number of seconds",
        ),
        # valid JSON numbers no duration holds: the run hung (its task failed, retried forever)
        # or failed untyped after storing its input
        (
            {
                "session_id": "s",
                "agent": "a",
                "options": {"model_retry": {"initial_interval": 1e30}},
            },
            "options.model_retry.initial_interval",
            "at most 315576000000 seconds",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"approval_wait": 1e30}},
            "options.approval_wait",
            "at most 315576000000 seconds",
        ),
        (
            {"session_id": "s", "agent": "a", "timeouts": {"model_start_to_close": 1e30}},
            "timeouts.model_start_to_close",
            "at most 315576000000 seconds",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"approval_wait": float("nan")}},
            "options.approval_wait",
            "a number of seconds",
        ),
        # JSON types as given: lax, "yes" read as true, "no" as false, "30" as 30 seconds
        (
            {
                "session_id": "s",
                "agent": "a",
                "inputs": [{"role": "user", "content": "x", "ephemeral": "yes"}],
            },
            "inputs[0].ephemeral",
            "valid boolean",
        ),
        (
            {
                "session_id": "s",
                "agent": "a",
                "inputs": [{"role": "user", "content": "x", "meta": 1}],
            },
            "inputs[0].meta",
            "valid boolean",
        ),
        (
            {"session_id": "s", "agent": "a", "text": "x", "create_session": "no"},
            "create_session",
            "boolean",
        ),
        (
            {"session_id": "s", "agent": "a", "timeouts": {"model_start_to_close": "30"}},
            "timeouts.model_start_to_close",
            "valid number",
        ),
        (
            {"session_id": "s", "agent": "a", "continue_as_new_after_turns": "2"},
            "continue_as_new_after_turns",
            "integer",
        ),
        # a null where the worker needs a value: the input was stored, then the model call failed
        # with pydantic's report
        (
            {"session_id": "s", "agent": "a", "options": {"system_prompt": None}},
            "options.system_prompt",
            "a string",
        ),
        (
            {"session_id": "s", "agent": "a", "options": {"model_options": None}},
            "options.model_options",
            "an object",
        ),
        # the run ID becomes part of the workflow IDs clients look the run up by
        (
            {"session_id": "s", "agent": "a", "run_id": "op 1/../x"},
            "run_id",
            "invalid run ID 'op 1/../x'",
        ),
        ({"session_id": "s", "agent": "a", "run_id": "r" * 65}, "run_id", "1-64 characters"),
        # what only continue-as-new carries: typed by hand, it dropped the input, claimed entries
        # the run never stored, or took the run for a reset
        (
            {"session_id": "s", "agent": "a", "text": "x", "resumed": True},
            "resumed",
            "continue-as-new",
        ),
        (
            {"session_id": "s", "agent": "a", "text": "x", "turn_count": 50},
            "turn_count",
            "continue-as-new",
        ),
        (
            {"session_id": "s", "agent": "a", "new_entry_ids": ["e1"]},
            "new_entry_ids",
            "continue-as-new",
        ),
        ({"session_id": "s", "agent": "a", "reset_of": "r0"}, "reset_of", "continue-as-new"),
        ({"session_id": "s", "agent": "a", "ephemeral": ["x"]}, "ephemeral", "continue-as-new"),
    ],
)
def test_every_input_problem_names_its_field(value: Any, field: str, problem: str) -> None:
    with pytest.raises(InvalidRunInputError) as info:
        decode_run_input(value)
    assert info.value.field == field
    assert problem in str(info.value)
    if field:
        assert f"invalid run input: {field}: " in str(info.value)


def test_plain_input_becomes_stamped_messages() -> None:
    inp = decode_run_input(
        {
            "session_id": "user-42",
            "agent": "assistant",
            "inputs": [
                {"role": "user", "content": "context"},
                {"role": "user", "content": "a nudge", "ephemeral": True},
            ],
            "text": "hi",
        }
    )
    assert inp.run_id == "" and inp.leaf_id is None
    entries = [input_entry(item) for item in inp.inputs]
    assert [e.id for e in entries] == ["", "", ""]  # the run draws their IDs
    assert [isinstance(e, MessageEntry) and e.ephemeral for e in entries] == [False, True, False]
    texts = [e.message.text() for e in entries if isinstance(e, MessageEntry)]
    assert texts == ["context", "a nudge", "hi"]


def test_what_continue_as_new_carries_is_read_on_a_continued_run() -> None:
    value = {
        "session_id": "s",
        "agent": "a",
        "leaf_id": "e2",
        "resumed": True,
        "turn_count": 3,
        "new_entry_ids": ["e1", "e2"],
        "next_position": 9,
    }
    inp = decode_run_input(value, continued=True)
    assert inp.resumed and inp.turn_count == 3 and inp.new_entry_ids == ["e1", "e2"]


# -- on the server ------------------------------------------------------------------------------


def pasted_text(session: str) -> str:
    """The README's input, exactly as an operator pastes it."""
    return f'{{"session_id": "{session}", "agent": "assistant", "text": "hi"}}'


@pytest.fixture
async def production_worker(temporal_client: Client) -> AsyncIterator[tuple[str, Store]]:
    """A worker as deployed (workflow bugs retry the task), with an agent named ``assistant``."""
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(["hello, operator"] * 4))
    worker = await create_worker(
        temporal_client, task_queue=q, store=store, agents={"assistant": spec}
    )
    async with worker:
        yield q, store


async def _failure(
    client: Client, value: Any, task_queue: str, workflow_id: str
) -> ApplicationError:
    if value is NO_ARGUMENT:  # the UI's Input field left empty
        handle = await client.start_workflow(
            "durable_agent.run", id=workflow_id, task_queue=task_queue
        )
    else:
        handle = await client.start_workflow(
            "durable_agent.run", value, id=workflow_id, task_queue=task_queue
        )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    history = await handle.fetch_history()
    types = event_types(history.to_json())
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
    assert "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED" not in types  # nothing stored, nothing created
    assert types[-1] == "EVENT_TYPE_WORKFLOW_EXECUTION_FAILED"
    return cause


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (
            {"run_id": "r1", "agent": "assistant", "inputs": [{"wire": ENTRY_WITHOUT_HEADER}]},
            "inputs[0].wire",
        ),
        ({"agent": "assistant", "text": "hi"}, "session_id"),
        ({"agent": "assistant", "inputs": [{"role": "user", "content": 3}]}, "inputs[0].content"),
        ("hi", ""),
        (None, ""),
        (NO_ARGUMENT, ""),
        (
            {"agent": "assistant", "text": "hi", "timeouts": {"store_start_to_close": 0}},
            "timeouts.store_start_to_close",
        ),
        ({"agent": "assistant", "text": ""}, "text"),
        ({"agent": "assistant", "inputs": [{"role": "user", "content": []}]}, "inputs[0].content"),
        ({"agent": "assistant", "text": "hi", "options": {"max_turns": 0}}, "options.max_turns"),
        (
            {"agent": "assistant", "text": "hi", "options": {"approval_wait": "1h"}},
            "options.approval_wait",
        ),
        (
            {"agent": "assistant", "text": "hi", "options": {"model_retry": {"max_attempts": -1}}},
            "options.model_retry.max_attempts",
        ),
        ({"agent": "assistant", "inputs": []}, "inputs"),
        ({"agent": "assistant"}, "inputs"),
        (
            {
                "agent": "assistant",
                "text": "hi",
                "options": {"model_retry": {"initial_interval": 1e30}},
            },
            "options.model_retry.initial_interval",
        ),
        (
            {"agent": "assistant", "text": "hi", "timeouts": {"model_start_to_close": 1e30}},
            "timeouts.model_start_to_close",
        ),
        # each of these ran: the nudge taken for ephemeral, "30" for 30 seconds, a run ID no
        # client finds the run by, the input stored and then the model call failed on the null,
        # the input dropped (a continue-as-new's flag), a run taken for a reset of another
        (
            {
                "agent": "assistant",
                "text": "hi",
                "inputs": [{"role": "user", "content": "nudge", "ephemeral": "yes"}],
            },
            "inputs[0].ephemeral",
        ),
        (
            {"agent": "assistant", "text": "hi", "timeouts": {"model_start_to_close": "30"}},
            "timeouts.model_start_to_close",
        ),
        ({"agent": "assistant", "text": "hi", "run_id": "op 1/../x"}, "run_id"),
        (
            {"agent": "assistant", "text": "hi", "options": {"system_prompt": None}},
            "options.system_prompt",
        ),
        ({"agent": "assistant", "text": "hi", "resumed": True}, "resumed"),
        # JSON no parser takes (a lone surrogate escape): pydantic's report was the message
        (RawValue(Payload(metadata={"encoding": b"json/plain"}, data=rb'["\ud800"]')), ""),
        ({"agent": "assistant", "text": "hi", "reset_of": "r0"}, "reset_of"),
    ],
)
async def test_bad_input_fails_the_run_at_once_before_anything_is_stored(
    temporal_client: Client, production_worker: tuple[str, Store], value: Any, field: str
) -> None:
    task_queue, store = production_worker
    session = sid("bad-input")
    if isinstance(value, dict) and "agent" in value and field != "session_id":
        value = {"session_id": session, **value}
    cause = await _failure(temporal_client, value, task_queue, run_workflow_id(session, "r1"))
    assert cause.type == "InvalidRunInput" and cause.non_retryable
    assert cause.message.startswith("invalid run input")
    assert "\n" not in cause.message, cause.message  # one line, as the UI shows it
    if field:
        assert f": {field}: " in cause.message
    with pytest.raises(SessionNotFoundError):
        await store.load_entries(session)


@pytest.mark.parametrize("field", ["agent", "leaf_id"])
async def test_a_huge_name_fails_the_run_quoted_short(
    temporal_client: Client, production_worker: tuple[str, Store], field: str
) -> None:
    """An agent or leaf of 1.5 MB (the server takes inputs up to 2 MB): its failure quoted it
    whole, in each of its causes, and the workflow task that reported it was refused as too
    large (``PayloadsTooLarge``), again and again until the execution timeout."""
    task_queue, store = production_worker
    session = sid("huge")
    value = json.loads(pasted_text(session))
    if field == "leaf_id":  # the leaf is looked up in a session that exists
        wid = run_workflow_id(session, "r0")
        first = await temporal_client.start_workflow(
            "durable_agent.run", value, id=wid, task_queue=task_queue
        )
        await asyncio.wait_for(first.result(), timeout=30)
    before = [e.id for e in await store.load_entries(session)] if field == "leaf_id" else []
    handle = await temporal_client.start_workflow(
        "durable_agent.run",
        {**value, field: "x" * 1_500_000},
        id=run_workflow_id(session, "r1"),
        task_queue=task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert len(cause.message) < 300 and "'xxxxxxxxxx" in cause.message, cause.message[:300]
    types = event_types((await handle.fetch_history()).to_json())
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
    if field == "leaf_id":
        assert [e.id for e in await store.load_entries(session)] == before
    else:
        with pytest.raises(SessionNotFoundError):
            await store.load_entries(session)


HUGE = "x" * 1_900_000


@pytest.mark.parametrize(
    ("workflow", "value"),
    [
        ("run", {HUGE: 1}),
        ("run", {"options": {HUGE: 1}}),
        ("run", {"inputs": [{"role": "user", "content": "hi", HUGE: 1}]}),
        ("run", {"inputs": [{"role": "user", "content": [{"type": HUGE}]}]}),
        ("run", {"inputs": [{"wire": json.dumps({"type": HUGE})}]}),
        ("compact", {HUGE: 1}),
        ("compact", {"timeouts": {HUGE: 1}}),
    ],
    ids=["field", "option", "message-field", "content-type", "wire-type", "compact", "timeout"],
)
async def test_a_huge_field_name_fails_the_workflow_quoted_short(
    temporal_client: Client, production_worker: tuple[str, Store], workflow: str, value: Any
) -> None:
    """A field name (or a content type) of 1.9 MB an operator typed: the failure quoted it
    whole, so the message held it all, as does the failure in the history."""
    task_queue, store = production_worker
    session = sid("huge-field")
    base = {"session_id": session, "agent": "assistant", "op_id": "c1", "leaf_id": "e1"}
    if workflow == "run":
        base = {"session_id": session, "agent": "assistant", "text": "hi"}
    wid = f"durable-agent/{session}/{workflow}/r1"
    handle = await temporal_client.start_workflow(
        f"durable_agent.{workflow}", {**base, **value}, id=wid, task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type in ("InvalidRunInput", "InvalidCompactInput"), cause.type
    assert len(cause.message) < 300 and "xxxxxxxxxx…" in cause.message, cause.message[:300]
    history = (await handle.fetch_history()).to_json()
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in event_types(history)
    assert len(history) < 2 * len(HUGE), len(history)  # the input, not the input and its quote
    with pytest.raises(SessionNotFoundError):
        await store.load_entries(session)


@pytest.mark.parametrize(
    ("named", "field"), [({"session_id": "{other}"}, "session_id"), ({"run_id": "r2"}, "run_id")]
)
async def test_an_input_naming_another_run_than_its_workflow_id_fails_at_once(
    temporal_client: Client, production_worker: tuple[str, Store], named: dict[str, str], field: str
) -> None:
    """A run started as ``durable-agent/<session>/run/<run>`` whose input names another session
    or run: it ran, and clients, which find a run by that ID, did not find it. ``durable-agent
    approve`` on the session its input named stored the decision and ran the call in a run of
    its own, while this one went on waiting for the call (a decision sent to it would run the
    call again)."""
    task_queue, store = production_worker
    session, other = sid("wid"), sid("other")
    value = {**json.loads(pasted_text(session)), **named}
    value = {k: v.format(other=other) for k, v in value.items()}
    cause = await _failure(temporal_client, value, task_queue, run_workflow_id(session, "r1"))
    assert cause.type == "InvalidRunInput" and cause.non_retryable
    assert cause.message.startswith(f"invalid run input: {field}: "), cause.message
    assert "the workflow ID" in cause.message, cause.message
    for either in (session, other):
        with pytest.raises(SessionNotFoundError):
            await store.load_entries(either)


@pytest.mark.parametrize("tail", ["a/b", "op 1", "r" * 65])
async def test_a_workflow_id_naming_a_run_id_no_client_takes_fails_at_once(
    temporal_client: Client, production_worker: tuple[str, Store], tail: str
) -> None:
    """An operator's run started as ``durable-agent/<session>/run/a/b``, its input naming no run:
    its run ID came from the workflow ID, ``a/b``, which ``run()`` refuses and the HTTP API
    cannot address; it ran and stored its conversation. It fails as a ``run_id`` typed in the
    input does, before anything is stored, and is listed under its session."""
    task_queue, store = production_worker
    session = sid("wid-run")
    wid = f"durable-agent/{session}/run/{tail}"
    cause = await _failure(temporal_client, json.loads(pasted_text(session)), task_queue, wid)
    assert cause.type == "InvalidRunInput" and cause.non_retryable, cause
    assert cause.message.startswith("invalid run input: run_id: invalid run ID "), cause.message
    assert "the workflow ID" in cause.message and "1-64 characters" in cause.message
    with pytest.raises(SessionNotFoundError):
        await store.load_entries(session)
    attributes = (await temporal_client.get_workflow_handle(wid).describe()).typed_search_attributes
    assert attributes.get(SESSION_ID_KEY) == session, attributes


async def test_two_inputs_fail_the_run_at_once_as_one_bad_input_does(
    temporal_client: Client, production_worker: tuple[str, Store]
) -> None:
    """``temporal workflow start --input A --input B`` (the flag repeats) gives the run two
    arguments: the SDK called ``run`` with both, a TypeError that failed the workflow task,
    retried until the execution timeout, a traceback in the worker's log each time."""
    task_queue, store = production_worker
    session = sid("two-inputs")
    value = json.loads(pasted_text(session))
    handle = await temporal_client.start_workflow(
        "durable_agent.run",
        args=[value, {"text": "more"}],
        id=run_workflow_id(session, "r1"),
        task_queue=task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type == "InvalidRunInput" and cause.non_retryable
    assert cause.message.startswith("invalid run input: 2 inputs given"), cause.message
    types = event_types((await handle.fetch_history()).to_json())
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
    assert "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED" not in types
    with pytest.raises(SessionNotFoundError):
        await store.load_entries(session)


async def test_the_state_of_a_run_whose_input_was_refused_says_so(
    temporal_client: Client, production_worker: tuple[str, Store]
) -> None:
    """The UI's Queries tab on such a run: ``state`` failed on a bare ``assert``, an error
    without a message ("querying workflow failed: ")."""
    task_queue, _ = production_worker
    session = sid("refused-state")
    value = {"session_id": session, "agent": "assistant", "txt": "hi"}
    handle = await temporal_client.start_workflow(
        "durable_agent.run", value, id=run_workflow_id(session, "r1"), task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), timeout=20)
    with pytest.raises(WorkflowQueryFailedError) as info:
        await handle.query("state")
    assert "input was refused" in info.value.message, info.value.message


async def test_an_operator_starts_a_run_from_plain_json_with_the_default_converter(
    temporal_client: Client, production_worker: tuple[str, Store], address: str
) -> None:
    task_queue, store = production_worker
    raw = await Client.connect(address, namespace=temporal_client.namespace)  # default converter
    session = f"user-{uuid.uuid4().hex[:8]}"
    pasted = json.loads(pasted_text(session))
    handle = await raw.start_workflow(
        "durable_agent.run", pasted, id=run_workflow_id(session, "op1"), task_queue=task_queue
    )
    result = await asyncio.wait_for(handle.result(), timeout=30)

    assert isinstance(result, dict) and result["status"] == "completed"
    stored = await store.load_entries(session)
    assert [e.id for e in stored] == result["new_entry_ids"]
    messages = [e.message for e in stored if isinstance(e, MessageEntry)]
    assert [(m.role, m.text()) for m in messages] == [
        ("user", "hi"),
        ("assistant", "hello, operator"),
    ]
    assert messages[0].timestamp is not None  # stamped by the run
    assert stored[0].parent_id is None and stored[1].parent_id == stored[0].id
    assert all(len(e.id) == 16 for e in stored)

    # plain message objects as inputs, a workflow ID the operator made up; the run continues
    # from the last entry, and a handle opened on the session sees the whole conversation
    second = await raw.start_workflow(
        "durable_agent.run",
        {
            "session_id": session,
            "agent": "assistant",
            "inputs": [
                {"role": "user", "content": [{"type": "text", "text": "more context"}]},
                {"role": "user", "content": "and a question"},
            ],
        },
        id=f"operator-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
    )
    again = await asyncio.wait_for(second.result(), timeout=30)
    assert again["status"] == "completed"
    agent = await new(
        "assistant", store=store, session_id=session, executor=executor(temporal_client, task_queue)
    )
    assert [m.text() for m in agent.messages()] == [
        "hi",
        "hello, operator",
        "more context",
        "and a question",
        "hello, operator",
    ]
    stored = await store.load_entries(session)
    assert stored[2].parent_id == stored[1].id

    # the README's shell command, through the temporal CLI
    wid = run_workflow_id(session, "op-cli")
    command = [
        temporal_binary("temporal"),
        *("workflow", "start", "--address", address, "--namespace", raw.namespace),
        *("--type", "durable_agent.run", "--task-queue", task_queue, "--workflow-id", wid),
        *("--execution-timeout", "24h", "--input", pasted_text(session)),
    ]
    started = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
    )
    assert started.returncode == 0, started.stdout + started.stderr
    third = await asyncio.wait_for(raw.get_workflow_handle(wid).result(), timeout=30)
    assert third["status"] == "completed" and len(third["new_entry_ids"]) == 2


@pytest.mark.parametrize(
    ("value", "workflow_id", "found"),
    [
        ("hi", "durable-agent/{session}/run/r1", True),
        (NO_ARGUMENT, "durable-agent/{session}/run/r1", True),
        ({"session_id": "{session}", "agent": "assistant", "txt": "hi"}, "operator-{uid}", True),
        ({"session_id": "a b", "agent": "assistant", "text": "hi"}, "operator-{uid}", False),
        ("hi", "durable-agent/not a session/run/r1", False),
        ([{"session_id": "{session}", "agent": "assistant", "text": "hi"}, {}], "{run_id}", True),
    ],
    ids=["not-an-object", "no-input", "input-names-it", "none", "bad-id", "two-inputs"],
)
async def test_a_run_whose_input_was_refused_is_found_by_its_session(
    temporal_client: Client,
    production_worker: tuple[str, Store],
    value: Any,
    workflow_id: str,
    found: bool,
) -> None:
    """An operator's run whose input is refused still sets the search attributes, from its input's
    session ID or else from its workflow ID (``durable-agent/<session>/run/<run>``), so
    ``temporal workflow list --query 'DurableAgentSessionId="..."'`` and ``durable-agent state``
    list it: it failed before it set them, and was found by neither."""
    task_queue, _ = production_worker
    session, uid = sid("refused"), uuid.uuid4().hex[:8]

    def named(text: Any) -> Any:
        if isinstance(text, str):
            return text.format(session=session, uid=uid, run_id=run_workflow_id(session, "r1"))
        if isinstance(text, dict):
            return {k: named(v) for k, v in text.items()}
        return [named(v) for v in text] if isinstance(text, list) else text

    wid = named(workflow_id)
    if isinstance(value, list):  # ``--input A --input B``
        handle = await temporal_client.start_workflow(
            "durable_agent.run", args=named(value), id=wid, task_queue=task_queue
        )
        with pytest.raises(WorkflowFailureError) as info:
            await asyncio.wait_for(handle.result(), timeout=20)
        assert isinstance(info.value.cause, ApplicationError)
        assert info.value.cause.type == "InvalidRunInput"
    else:
        cause = await _failure(temporal_client, named(value), task_queue, wid)
        assert cause.type == "InvalidRunInput"
        handle = temporal_client.get_workflow_handle(wid)
    attributes = (await handle.describe()).typed_search_attributes
    if not found:
        assert attributes.get(SESSION_ID_KEY) is None, attributes
        return
    assert attributes.get(SESSION_ID_KEY) == session, attributes
    assert attributes.get(KIND_KEY) == "run", attributes
    query = f'DurableAgentSessionId = "{session}" AND DurableAgentKind = "run"'

    async def listed() -> bool:
        return [w.id async for w in temporal_client.list_workflows(query)] == [wid]

    await eventually(listed, what="the refused run listed by its session")


# -- the other workflow inputs and arguments an operator types -----------------------------------


async def _session_with_a_run(client: Client, task_queue: str) -> tuple[str, str]:
    """A session holding one operator run; its workflow ID."""
    session = sid("typed")
    wid = run_workflow_id(session, "r1")
    handle = await client.start_workflow(
        "durable_agent.run", json.loads(pasted_text(session)), id=wid, task_queue=task_queue
    )
    await asyncio.wait_for(handle.result(), timeout=30)
    return session, wid


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({}, "session_id"),
        ({"keep_turns": "1"}, "keep_turns"),
        ({"keep_turns": -1}, "keep_turns"),
        ({"kep_turns": 1}, "kep_turns"),
        ({"session_id": "a b"}, "session_id"),
        ({"agent": ""}, "agent"),
        ({"options": {"system_prompt": None}}, "options.system_prompt"),
        ({"options": {"max_turn": 3}}, "options.max_turn"),  # a typo: ignored, or an activity's
        ({"timeouts": {"store_start_to_close": "30"}}, "timeouts.store_start_to_close"),
        ("hi", ""),
        (NO_ARGUMENT, ""),
    ],
)
async def test_bad_compaction_input_fails_it_at_once_storing_nothing(
    temporal_client: Client, production_worker: tuple[str, Store], value: Any, field: str
) -> None:
    """A compaction started by hand (``durable_agent.compact``) whose input the SDK could not
    decode failed its workflow task, retried until the execution timeout; a lax one compacted
    (``"1"`` for 1); a typo was ignored; a bad value failed an activity (retried, for a null
    option), its failure ``Activity task failed``. Each fails the workflow at once, typed,
    naming the field, as a run's input does."""
    task_queue, store = production_worker
    session, _ = await _session_with_a_run(temporal_client, task_queue)
    before = await store.load_entries(session)
    ok = {"session_id": session, "op_id": "c1", "agent": "assistant", "leaf_id": before[-1].id}
    if value is not NO_ARGUMENT and isinstance(value, dict):
        value = {} if field == "session_id" and not value else {**ok, **value}
    wid = f"durable-agent/{session}/compact/c1"
    args = [] if value is NO_ARGUMENT else [value]
    handle = await temporal_client.start_workflow(
        "durable_agent.compact", args=args, id=wid, task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type == "InvalidCompactInput" and cause.non_retryable, cause
    assert cause.message.startswith("invalid compact input: "), cause.message
    if field:
        assert f": {field}: " in cause.message, cause.message
    types = event_types((await handle.fetch_history()).to_json())
    assert "EVENT_TYPE_WORKFLOW_TASK_FAILED" not in types
    assert "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED" not in types
    assert await store.load_entries(session) == before


@pytest.mark.parametrize(
    ("args", "workflow_id", "found"),
    [
        (["hi"], "durable-agent/{session}/compact/c1", True),
        ([], "durable-agent/{session}/compact/c1", True),
        ([{"session_id": "{session}", "agent": "assistant", "kep_turns": 1}], "op-{uid}", True),
        ([{"session_id": "a b", "agent": "assistant", "op_id": "c1"}], "op-{uid}", False),
        (["hi"], "durable-agent/not a session/compact/c1", False),
        ([{"session_id": "{session}"}, {}], "durable-agent/{session}/compact/c1", True),
    ],
    ids=["not-an-object", "no-input", "input-names-it", "none", "bad-id", "two-inputs"],
)
async def test_a_compaction_whose_input_was_refused_is_found_by_its_session(
    temporal_client: Client,
    production_worker: tuple[str, Store],
    args: list[Any],
    workflow_id: str,
    found: bool,
) -> None:
    """As a refused run is: a compaction started by hand whose input is refused sets the search
    attributes from its input's session ID, else its workflow ID's
    (``durable-agent/<session>/compact/<op>``), so an operator searching the session's
    workflows finds it; it set none, and was listed under no session."""
    task_queue, _ = production_worker
    session, uid = sid("refused-compact"), uuid.uuid4().hex[:8]

    def named(text: Any) -> Any:
        if isinstance(text, str):
            return text.format(session=session, uid=uid)
        return {k: named(v) for k, v in text.items()} if isinstance(text, dict) else text

    wid = named(workflow_id)
    handle = await temporal_client.start_workflow(
        "durable_agent.compact", args=[named(a) for a in args], id=wid, task_queue=task_queue
    )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    assert isinstance(info.value.cause, ApplicationError), repr(info.value.cause)
    assert info.value.cause.type == "InvalidCompactInput", info.value.cause
    attributes = (await handle.describe()).typed_search_attributes
    if not found:
        assert attributes.get(SESSION_ID_KEY) is None, attributes
        return
    assert attributes.get(SESSION_ID_KEY) == session, attributes
    assert attributes.get(KIND_KEY) == "compact", attributes
    query = f'DurableAgentSessionId = "{session}" AND DurableAgentKind = "compact"'

    async def listed() -> bool:
        return [w.id async for w in temporal_client.list_workflows(query)] == [wid]

    await eventually(listed, what="the refused compaction listed by its session")


@pytest.mark.parametrize("workflow", ["run", "compact"])
async def test_an_agent_the_worker_lacks_fails_a_run_and_a_compaction_alike(
    temporal_client: Client, production_worker: tuple[str, Store], workflow: str
) -> None:
    """A run started by hand for an agent the worker does not know fails as
    ``UnknownAgentError`` naming it; a compaction's failure was ``Activity task failed``, the
    agent named only in its cause. Both now say it at the top, storing nothing."""
    task_queue, store = production_worker
    session, _ = await _session_with_a_run(temporal_client, task_queue)
    before = await store.load_entries(session)
    value: dict[str, Any] = {"session_id": session, "agent": "nobody"}
    if workflow == "run":
        value["text"] = "hi"
    else:
        value.update(op_id="c1", leaf_id=before[-1].id)
    handle = await temporal_client.start_workflow(
        f"durable_agent.{workflow}",
        value,
        id=f"durable-agent/{session}/{workflow}/x1",
        task_queue=task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await asyncio.wait_for(handle.result(), timeout=20)
    cause = info.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type == "UnknownAgentError" and cause.non_retryable, cause
    assert cause.message == "unknown agent 'nobody' (this worker has: assistant)", cause.message
    assert await store.load_entries(session) == before


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["abc"], "after: must be an integer (an event position), not a string"),
        ([None], "not null"),
        ([1.5], "not 1.5"),
        ([True], "not a boolean"),  # lax: true read as 1
        (["3"], "not a string"),  # lax: read as 3
        ([{"after": 1}], "not an object"),
        ([1, 2], "2 inputs given; expected one"),
    ],
)
async def test_a_bad_events_query_argument_is_refused_naming_it(
    temporal_client: Client, production_worker: tuple[str, Store], args: list[Any], problem: str
) -> None:
    """The ``events`` query from the UI's Queries tab or ``temporal workflow query``: an argument
    the SDK could not read as an integer was refused as ``Failed decoding arguments``, two as a
    Python ``TypeError`` (``RunWorkflow.events() takes from 1 to 2 positional arguments``)."""
    task_queue, _ = production_worker
    _, wid = await _session_with_a_run(temporal_client, task_queue)
    handle = temporal_client.get_workflow_handle(wid)
    with pytest.raises(WorkflowQueryFailedError) as info:
        await handle.query("events", args=args)
    assert info.value.message.startswith("invalid events input: "), info.value.message
    assert problem in info.value.message, info.value.message
    answer = await handle.query("events", 2)  # a good one is answered as before
    assert [e["position"] for e in answer["events"]][:1] == [3], answer
