"""Reading a run workflow's input: the client's wire form, or what an operator types.

The run workflow takes its input as a raw payload and decodes it here, so that no input problem
can fail the workflow *task* (which Temporal retries forever, leaving the run Running and silent):
anything wrong raises :class:`InvalidRunInputError`, naming the field, and the workflow fails at
once with a non-retryable ``ApplicationError`` of type ``InvalidRunInput``, before it stores or
schedules anything, its search attributes set from the input's session ID or else the workflow ID's,
so it is listed under its session (docs/design.md#errors).

The client writes the same form an operator can type (:class:`RunInput`, each input message a
plain message object); the Temporal UI's Start Workflow form can be filled in by hand::

    {"session_id": "user-42", "agent": "assistant", "text": "hi"}

``run_id`` may be left out (the run derives it from the workflow ID), ``text`` is one user message
(after any ``inputs``), and each ``inputs`` item may be a plain message object without ID or times,
``{"role": "user", "content": "hi"}`` (``content`` a string or a list of blocks; ``"ephemeral":
true`` for this run only, ``"meta": true`` for context the transcript hides), which the run stamps
with its clock; a custom entry travels in its stored encoding, ``{"wire": "..."}``. Unknown
fields (at the top level and in plain messages) are refused, so a typo cannot go unnoticed, and
every value must be of its JSON type (``true``, not ``"yes"``; ``30``, not ``"30"``), so a typo
cannot flip a flag either. What only continue-as-new carries (``resumed``, ``turn_count``, ...)
is refused in a run's first input: typed by hand, it dropped the input or misstated the result.
"""

from __future__ import annotations

import hashlib
import math
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError

from ..activities.contracts import Timeouts
from ..activities.run_contracts import InputEntry, RunInput
from ..agent.options import AgentOptions
from ..ai.messages import Message
from ..durable.errors import InvalidRunInputError
from ..durable.inputs import EMPTY_MESSAGE, NOTHING_TO_ANSWER, check_run_id, empty_message
from ..session.codec import decode_entry
from ..session.entries import Entry, MessageEntry
from ..session.errors import SessionError
from ..session.ids import quoted, shortened, validate_session_id
from .search import ensure_refused_attributes, run_named

__all__ = [
    "INVALID_RUN_INPUT",
    "INVALID_UPDATE_INPUT",
    "input_entry",
    "NO_INPUT",
    "InvalidRunInputError",
    "check_names",
    "check_nested_keys",
    "check_plain_options",
    "check_timeouts",
    "decode_run_input",
    "derive_run_id",
    "first_error",
    "json_type",
    "normalized",
    "read_run_input",
    "refused_run",
    "undecodable",
    "validated",
]

INVALID_RUN_INPUT = "InvalidRunInput"
"""The ``ApplicationError`` type a run with unusable input fails with."""
INVALID_UPDATE_INPUT = "InvalidUpdateInput"
"""The ``ApplicationError`` type a ``decide`` or ``send`` update it cannot use is refused with."""
M = TypeVar("M", bound=BaseModel)

_PLAIN_OPTIONS = {"system_prompt": str, "max_turns": int, "model_options": dict}
"""The options the worker reads, and their JSON types (the other agent options are the worker's
to set, ignored here; a key that is no agent option is refused)."""


_NESTED = {"options": AgentOptions.model_fields, "timeouts": Timeouts.model_fields}
"""The input's objects whose keys are checked as its own are: an agent option, a timeout."""

NO_INPUT = RawValue(Payload())
"""What the run workflow gets when started without input (the UI's empty Input field)."""

CARRIED = (
    "resumed",
    "turn_count",
    "usage",
    "new_entry_ids",
    "next_position",
    "events",
    "ephemeral",
    "start_leaf_id",
    "reset_of",
)
"""The input fields only continue-as-new sets (``RunWorkflow._maybe_continue_as_new``)."""

MAX_SECONDS = 315_576_000_000
"""The longest duration Temporal schedules (10,000 years, protobuf's limit): a larger number in
JSON (``1e30``) failed the workflow task where it became a ``timedelta`` (retried forever) or the
run after storing its input."""

EXAMPLE = '{"session_id": "user-42", "agent": "assistant", "text": "hi"}'


def read_run_input(raw: RawValue) -> RunInput:
    """The run workflow's input, read in workflow code: a problem fails the workflow at once
    with a non-retryable ``InvalidRunInput``, never the workflow task (retried forever)."""
    value: Any = None
    try:
        if not raw.payload.metadata:
            raise InvalidRunInputError("", f"invalid run input: none given; expected {EXAMPLE}")
        value = workflow.payload_converter().from_payload(raw.payload)
        inp = decode_run_input(value, continued=workflow.info().continued_run_id is not None)
        _check_named(inp, workflow.info().workflow_id)
        if not inp.run_id:
            inp = inp.model_copy(update={"run_id": _derived_run_id(inp.session_id)})
    except InvalidRunInputError as exc:
        raise refused_run(str(exc), value) from None
    except Exception as exc:  # not JSON, or an encoding the worker's converter cannot read
        raise refused_run(f"invalid run input: {undecodable(exc)}", value) from None
    return inp


def _derived_run_id(session_id: str) -> str:
    """The run ID the workflow ID gives, held to the rule a typed one is: taken as it was
    (``durable-agent/<session>/run/a/b`` ran as ``a/b``), ``run()`` and the HTTP API could not
    address the run."""
    run_id = derive_run_id(workflow.info().workflow_id, session_id)
    try:
        check_run_id(run_id)
    except InvalidRunInputError as exc:
        raise InvalidRunInputError("run_id", f"{exc.problem}; it is the workflow ID's") from None
    return run_id


def _check_named(inp: RunInput, workflow_id: str) -> None:
    """The input names the session and run its workflow ID ``durable-agent/<session>/run/<run>``
    names, if it has that shape: clients find a run by that ID (``approve`` did not find one
    whose input named another, and ran its waiting calls in a run of its own)."""
    named = run_named(workflow_id)
    given = {"session_id": inp.session_id, "run_id": inp.run_id}
    for (field, value), expected in zip(given.items(), named or (), strict=False):
        if value and value != expected:
            problem = f"{quoted(value)}, but the workflow ID names {quoted(expected)}"
            raise InvalidRunInputError(field, problem)


def undecodable(exc: Exception) -> str:
    """Why a payload could not be decoded, in one line: pydantic's report (JSON no parser takes)
    is several, a URL on the last, and the UI shows a failure's message whole."""
    if isinstance(exc, ValidationError):
        return f"cannot decode the payload ({exc.errors(include_url=False)[0]['msg']})"
    return f"cannot decode the payload ({type(exc).__name__}: {exc})"


def refused_run(message: str, value: Any = None) -> ApplicationError:
    """The failure of a run whose input is refused, its search attributes set first (from the
    input's ``session_id`` or the workflow ID): an operator finds it by its session."""
    named = value.get("session_id") if isinstance(value, dict) else None
    ensure_refused_attributes(named)
    return ApplicationError(message, type=INVALID_RUN_INPUT, non_retryable=True)


def validated(model: type[M], data: dict[str, Any], *, forbid: bool = False) -> M:
    """``data`` (decoded JSON) as ``model``, strictly: each value of its JSON type, as typed.
    Lax, ``"yes"`` read as true, ``"no"`` and ``0`` as false, ``"30"`` as 30: an operator's
    typo flipped a flag or passed for a number. ``forbid``: an unknown field is refused."""
    return model.model_validate(data, strict=True, extra="forbid" if forbid else None)


def input_entry(item: InputEntry, now: datetime | None = None) -> Entry:
    """The entry of run input ``item`` under the ID its client chose (a message an operator
    typed has none: the run draws one when it stamps it), a message without a timestamp
    getting ``now`` (the workflow's clock)."""
    if item.message is not None:
        message = item.message
        if message.timestamp is None and now is not None:
            message = message.model_copy(update={"timestamp": now})
        header: dict[str, Any] = {"id": item.id}
        if now is not None:
            header["created_at"] = now
        return MessageEntry(**header, message=message, ephemeral=item.ephemeral, meta=item.meta)
    decoded = decode_entry(item.wire)
    if item.ephemeral and isinstance(decoded, MessageEntry):
        return decoded.model_copy(update={"ephemeral": True})
    return decoded


def decode_run_input(value: Any, *, continued: bool = False) -> RunInput:
    """A :class:`RunInput` from the decoded JSON payload, or :class:`InvalidRunInputError`;
    ``continued``: the input of a continue-as-new, which may carry :data:`CARRIED`."""
    if not isinstance(value, dict):
        raise InvalidRunInputError(
            "", f"invalid run input: expected a JSON object, got {json_type(value)}"
        )
    unknown = sorted(set(value) - set(RunInput.model_fields) - {"text"})
    if unknown:
        raise InvalidRunInputError(shortened(unknown[0]), "unknown field")
    check_nested_keys(value)
    carried = [] if continued else [name for name in CARRIED if name in value]
    if carried:
        problem = "carried by the run itself across continue-as-new, not given at its start"
        raise InvalidRunInputError(carried[0], problem)
    data, plain = normalized(value)
    try:
        inp = validated(RunInput, data)
    except ValidationError as exc:
        field, problem = first_error(exc, plain)
        raise InvalidRunInputError(field, problem) from None
    check_names(inp.session_id, inp.agent)
    if inp.run_id:  # none: derived from the workflow ID
        check_run_id(inp.run_id)
    check_plain_options(inp.options)
    check_timeouts(inp.timeouts)
    after = inp.continue_as_new_after_turns
    if after is not None and after < 1:
        raise InvalidRunInputError("continue_as_new_after_turns", "must be at least 1")
    for i, item in enumerate(inp.inputs):
        if item.message is None:
            try:
                input_entry(item)
            except ValueError as exc:  # EntryDecodeError: the wire is not an entry
                raise InvalidRunInputError(f"inputs[{i}].wire", str(exc)) from None
        elif empty_message(item.message):
            from_text = "text" in value and i == len(inp.inputs) - 1  # ``text`` goes last
            field = "text" if from_text else f"inputs[{i}].content"
            raise InvalidRunInputError(field, EMPTY_MESSAGE)
    if not inp.inputs and inp.leaf_id == "":
        raise InvalidRunInputError("inputs", NOTHING_TO_ANSWER)
    return inp


def check_nested_keys(value: dict[str, Any]) -> None:
    """Each key of ``options`` and ``timeouts`` is an agent option or a timeout: a typo there
    would do nothing, so it is refused as an unknown field is."""
    for name, known in _NESTED.items():
        given = value.get(name)
        unknown = (
            sorted(key for key in given if key not in known) if isinstance(given, dict) else []
        )
        if unknown:
            raise InvalidRunInputError(f"{name}.{shortened(unknown[0])}", "unknown field")


def check_names(session_id: str, agent: str) -> None:
    """A valid session ID, and an agent named."""
    try:
        validate_session_id(session_id)
    except SessionError as exc:
        raise InvalidRunInputError("session_id", str(exc)) from None
    if not agent:
        raise InvalidRunInputError("agent", "must name an agent registered on the worker")


def check_plain_options(options: dict[str, Any]) -> None:
    """The options the worker reads: of their JSON type (``null`` only for ``max_turns``, no
    limit), ``max_turns`` at least 1 (else the run would store its input and then fail; a
    client's ``new()`` refuses such values already)."""
    for key, kind in _PLAIN_OPTIONS.items():
        option = options.get(key)
        if key not in options or (option is None and key == "max_turns"):
            continue
        if not isinstance(option, kind) or isinstance(option, bool):
            expected = {str: "a string", int: "an integer", dict: "an object"}[kind]
            raise InvalidRunInputError(f"options.{key}", f"must be {expected}")
    max_turns = options.get("max_turns")
    if max_turns is not None and max_turns < 1:
        raise InvalidRunInputError("options.max_turns", "must be at least 1")
    # the workflow reads these two itself: a wrong value would fail its task, retried forever
    _check_number(options, "approval_wait", "options.approval_wait", "0 or more")
    retry = options.get("model_retry")
    if retry is not None and not isinstance(retry, dict):
        raise InvalidRunInputError("options.model_retry", "must be an object")
    retry = retry or {}
    attempts = retry.get("max_attempts")
    if attempts is not None and (not isinstance(attempts, int) or isinstance(attempts, bool)):
        raise InvalidRunInputError("options.model_retry.max_attempts", "must be an integer")
    if attempts is not None and attempts < 0:
        field = "options.model_retry.max_attempts"
        raise InvalidRunInputError(field, "must be 0 (unlimited) or more")
    _check_number(retry, "initial_interval", "options.model_retry.initial_interval", "")


def _check_number(values: dict[str, Any], key: str, field: str, at_least_zero: str) -> None:
    """``values[key]``, if given, is a number of seconds (and 0 or more, when
    ``at_least_zero`` says how to put it)."""
    value = values.get(key)
    if value is None:
        return
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value):
        raise InvalidRunInputError(field, f"must be a number of seconds, not {json_type(value)}")
    if at_least_zero and value < 0:
        raise InvalidRunInputError(field, f"must be {at_least_zero}")
    if value > MAX_SECONDS:
        raise InvalidRunInputError(field, f"must be at most {MAX_SECONDS} seconds")


def check_timeouts(timeouts: Timeouts) -> None:
    """Durations and attempt counts Temporal would refuse to schedule (a workflow task failure,
    retried forever) are refused here."""
    for name, value in timeouts.model_dump().items():
        if name.endswith("_max_attempts"):
            if value < 0:  # 0: unlimited, as in Temporal's retry policies
                raise InvalidRunInputError(f"timeouts.{name}", "must be 0 (unlimited) or more")
        elif not value > 0:
            raise InvalidRunInputError(f"timeouts.{name}", "must be greater than 0")
        elif value > MAX_SECONDS:
            raise InvalidRunInputError(f"timeouts.{name}", f"must be at most {MAX_SECONDS} seconds")


def derive_run_id(workflow_id: str, session_id: str) -> str:
    """The run ID of an input that gave none: the tail of a ``durable-agent/<session>/run/<id>``
    workflow ID, else 16 hex characters of the workflow ID's SHA-256 (stable across replays)."""
    prefix = f"durable-agent/{session_id}/run/"
    if workflow_id.startswith(prefix) and len(workflow_id) > len(prefix):
        return workflow_id[len(prefix) :]
    return hashlib.sha256(workflow_id.encode()).hexdigest()[:16]


def normalized(value: dict[str, Any]) -> tuple[dict[str, Any], set[int]]:
    """``value`` with ``text`` and plain message items in the model's shape, and the indexes
    of the plain items (their errors are named as the operator wrote them)."""
    data = dict(value)
    inputs = data.get("inputs", [])
    if not isinstance(inputs, list):
        return data, set()
    items: list[Any] = list(inputs)
    if "text" in data:
        text = data.pop("text")
        if not isinstance(text, str):
            raise InvalidRunInputError("text", f"must be a string, not {json_type(text)}")
        items.append({"role": "user", "content": text})
    plain: set[int] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "wire" in item:
            continue
        if "role" not in item:
            raise InvalidRunInputError(
                f"inputs[{i}]", 'needs "role" and "content" (a message) or "wire" (an entry)'
            )
        message = dict(item)
        extra = {"ephemeral", "meta", "id"}  # the flags, and the ID a client chose
        unknown = sorted(set(message) - set(Message.model_fields) - extra)
        if unknown:
            raise InvalidRunInputError(f"inputs[{i}].{shortened(unknown[0])}", "unknown field")
        flags = {k: message.pop(k) for k in sorted(extra) if k in message}
        if isinstance(message.get("content"), str):
            message["content"] = [{"type": "text", "text": message["content"]}]
        items[i] = {"message": message, **flags}
        plain.add(i)
    data["inputs"] = items
    return data, plain


def first_error(exc: ValidationError, plain: set[int]) -> tuple[str, str]:
    error = exc.errors(include_url=False)[0]
    loc = list(error["loc"])
    if len(loc) >= 3 and loc[0] == "inputs" and loc[1] in plain and loc[2] == "message":
        del loc[2]  # the operator wrote the message itself as the item
    if loc[:1] == ["inputs"] and len(loc) == 2 and error["type"] == "model_type":
        problem = 'must be an object: a message ("role", "content") or an entry ("wire")'
        return f"inputs[{loc[1]}]", problem
    field = ""
    for part in loc:
        if isinstance(part, int):
            field += f"[{part}]"
        else:
            field += ("." if field else "") + shortened(str(part))
    problem = str(error["msg"])
    for given in error.get("ctx", {}).values():  # what was typed (a content type, say)
        if isinstance(given, str) and given != shortened(given):
            problem = problem.replace(given, shortened(given))
    if error["type"] == "missing":
        problem = "required"
    elif error["type"] == "extra_forbidden":
        problem = "unknown field"
    return field, problem


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
