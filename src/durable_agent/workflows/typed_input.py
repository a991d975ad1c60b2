"""What operators hand the workflows besides a run's input, read in workflow code: the ``decide``
and ``send`` bodies, the compaction workflow's input, the ``events`` query's argument, and how
many arguments each is given.

Each comes as a raw payload and is read here, strictly (:func:`.run_input.validated`), so nothing
an operator types fails a workflow task (which Temporal retries forever) or reads as something
else: a bad body or argument is refused, a bad compaction input fails the workflow at once before
it summarizes or stores anything, each as a non-retryable ``ApplicationError`` naming the field,
as a run's input is (docs/design.md#errors).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleQueryInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from ..activities.run_contracts import CompactInput
from ..durable.errors import InvalidRunInputError
from .run_input import (
    EXAMPLE,
    INVALID_UPDATE_INPUT,
    check_names,
    check_nested_keys,
    check_plain_options,
    check_timeouts,
    first_error,
    json_type,
    normalized,
    refused_run,
    undecodable,
    validated,
)
from .search import ensure_refused_attributes

__all__ = [
    "INVALID_COMPACT_INPUT",
    "OneRunInput",
    "events_after",
    "read_body",
    "read_compact_input",
]

INVALID_COMPACT_INPUT = "InvalidCompactInput"
"""The ``ApplicationError`` type a compaction with unusable input fails with."""
M = TypeVar("M", bound=BaseModel)


def _refusal(what: str, kind: str, field: str, problem: str) -> ApplicationError:
    text = f"invalid {what} input: " + (f"{field}: {problem}" if field else problem)
    return ApplicationError(text, type=kind, non_retryable=True)


def read_body(raw: RawValue, model: type[M], what: str, kind: str = INVALID_UPDATE_INPUT) -> M:
    """An update's argument (or another input, ``what``) as an operator typed it, read in
    workflow code (an update's validator and its handler). A problem raises a non-retryable
    ``ApplicationError`` of type ``kind`` naming the field: left to the SDK, a body the model
    refused was a retryable ``RuntimeError`` in pydantic's words, and a plain message in
    ``inputs`` (the form a run's input takes) failed the workflow task."""
    if not raw.payload.metadata:
        raise _refusal(what, kind, "", "none given; expected a JSON object")
    try:
        value = workflow.payload_converter().from_payload(raw.payload)
    except Exception as exc:  # not JSON, or an encoding the worker's converter cannot read
        raise _refusal(what, kind, "", undecodable(exc)) from None
    if not isinstance(value, dict):
        raise _refusal(what, kind, "", f"expected a JSON object, got {json_type(value)}")
    plain: set[int] = set()
    try:
        if isinstance(value.get("inputs"), list):
            items, plain = normalized({"inputs": value["inputs"]})
            value = {**value, "inputs": items["inputs"]}
        return validated(model, value, forbid=True)
    except InvalidRunInputError as exc:
        raise _refusal(what, kind, exc.field, exc.problem) from None
    except ValidationError as exc:
        raise _refusal(what, kind, *first_error(exc, plain)) from None


def read_compact_input(raw: RawValue) -> CompactInput:
    """The compaction workflow's input. Left to the SDK, one it could not decode failed the
    workflow task, retried until the execution timeout; a lax one compacted (``"1"`` for 1
    turn), and a bad value failed an activity, the workflow's failure ``Activity task failed``.
    Refused, it sets its search attributes first, as a refused run does."""
    try:
        inp = read_body(raw, CompactInput, "compact", INVALID_COMPACT_INPUT)
        check_names(inp.session_id, inp.agent)
        if inp.keep_turns < 0:
            raise InvalidRunInputError("keep_turns", "must be 0 or more")
        check_nested_keys({"options": inp.options})
        check_plain_options(inp.options)
        check_timeouts(inp.timeouts)
    except InvalidRunInputError as exc:
        ensure_refused_attributes(inp.session_id)
        raise _refusal("compact", INVALID_COMPACT_INPUT, exc.field, exc.problem) from None
    except ApplicationError:
        ensure_refused_attributes(_session_named(raw))
        raise
    return inp


def _session_named(raw: RawValue) -> Any:
    """The ``session_id`` a refused input names, if it is a JSON object naming one."""
    if not raw.payload.metadata:
        return None
    try:
        value = workflow.payload_converter().from_payload(raw.payload)
    except Exception:  # not JSON: it names none
        return None
    return value.get("session_id") if isinstance(value, dict) else None


def events_after(raw: RawValue) -> int:
    """The ``events`` query's argument, the position to answer after (0 when none is given):
    an integer, not ``true`` or ``"3"`` (lax, read as 1 and 3), refused naming it (the SDK's
    refusal was ``Failed decoding arguments``)."""
    if not raw.payload.metadata:
        return 0
    try:
        value = workflow.payload_converter().from_payload(raw.payload)
    except Exception as exc:  # not JSON, or an encoding the worker's converter cannot read
        problem = undecodable(exc)
        raise ApplicationError(f"invalid events input: {problem}", non_retryable=True) from None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    shown = repr(value) if isinstance(value, float) else json_type(value)
    problem = f"after: must be an integer (an event position), not {shown}"
    raise ApplicationError(f"invalid events input: {problem}", non_retryable=True)


class OneRunInput(Interceptor):
    """The worker interceptor that fails a run or a compaction given more than one input
    (``temporal workflow start --input A --input B``) as any bad input does: the SDK hands
    ``run`` every argument, and the TypeError of the call fails the workflow task, retried until
    the execution timeout. An update or query given two is refused as a bad body is (the SDK's
    refusal was a retryable TypeError, in Python's words)."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor]:
        return _OneRunInputInbound


class _OneRunInputInbound(WorkflowInboundInterceptor):
    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        given = f"{len(input.args)} inputs given; expected one"
        kind = workflow.info().workflow_type
        if len(input.args) > 1 and kind == "durable_agent.run":
            raise refused_run(f"invalid run input: {given}, as {EXAMPLE}")
        if len(input.args) > 1 and kind == "durable_agent.compact":
            ensure_refused_attributes()
            raise _refusal("compact", INVALID_COMPACT_INPUT, "", given)
        return await super().execute_workflow(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        if len(input.args) > 1:
            given = f"{len(input.args)} inputs given; expected one"
            raise _refusal(input.update, INVALID_UPDATE_INPUT, "", given)
        super().handle_update_validator(input)

    def handle_query(self, input: HandleQueryInput) -> Any:
        if len(input.args) > 1 and not input.query.startswith("__"):  # the SDK's own
            given = f"{len(input.args)} inputs given; expected one"
            raise ApplicationError(f"invalid {input.query} input: {given}", non_retryable=True)
        return super().handle_query(input)
