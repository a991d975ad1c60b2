"""What operators hand the workflows besides a run's input, read in workflow code: the ``decide``
and ``send`` bodies, and how many arguments a run or an update is given.

Each comes as a raw payload and is read here, strictly (:func:`.run_input.validated`), so nothing
an operator types fails a workflow task (which Temporal retries forever) or reads as something
else: a bad body is refused as a non-retryable ``ApplicationError`` naming the field, as a run's
input is (docs/design.md#errors).
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError
from temporalio.worker import (
    ExecuteWorkflowInput,
    HandleUpdateInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from ..durable.errors import InvalidRunInputError
from .run_input import (
    EXAMPLE,
    INVALID_UPDATE_INPUT,
    first_error,
    json_type,
    normalized,
    refused_run,
    validated,
)

__all__ = [
    "OneRunInput",
    "read_body",
]

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
        problem = f"cannot decode the payload ({type(exc).__name__}: {exc})"
        raise _refusal(what, kind, "", problem) from None
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


class OneRunInput(Interceptor):
    """The worker interceptor that fails a run given more than one input (``temporal workflow
    start --input A --input B``) as any bad input does: the SDK hands ``run`` every argument, and
    the TypeError of the call fails the workflow task, retried until the execution timeout. An
    update given two is refused as a bad body is (the SDK's refusal was a retryable TypeError)."""

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
        return await super().execute_workflow(input)

    def handle_update_validator(self, input: HandleUpdateInput) -> None:
        if len(input.args) > 1:
            given = f"{len(input.args)} inputs given; expected one"
            raise _refusal(input.update, INVALID_UPDATE_INPUT, "", given)
        super().handle_update_validator(input)
