"""SPEC §5.1: the repair projection ``repair_tool_calls`` (and ``dangling_calls`` used by §5.2)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from durable_agent.ai import (
    Message,
    StopReason,
    TextContent,
    ToolCall,
    error_tool_result_message,
    tool_result_message,
    user_message,
)
from durable_agent.session import (
    INTERRUPTED_TEXT,
    dangling_calls,
    interrupted_result,
    repair_tool_calls,
)

T_CALL = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)


def call(id: str, name: str = "echo", *, server: bool = False) -> ToolCall:
    return ToolCall(id=id, name=name, arguments={"q": id}, server=server)


def assistant(*calls: ToolCall, text: str = "", stop: StopReason | None = "tool_use") -> Message:
    blocks: list[TextContent | ToolCall] = [TextContent(text=text)] if text else []
    return Message(
        role="assistant",
        content=[*blocks, *calls],
        stop_reason=stop,
        timestamp=T_CALL,
        provider="p",
        model="m",
    )


def result(id: str, name: str = "echo", text: str = "ok") -> Message:
    return tool_result_message(id, name, TextContent(text=text))


def synthesized(id: str, name: str = "echo", when: datetime | None = T_CALL) -> Message:
    return Message(
        role="tool_result",
        content=[TextContent(text="tool execution interrupted")],
        tool_call_id=id,
        tool_name=name,
        is_error=True,
        timestamp=when,
    )


def shape(messages: Sequence[Message]) -> list[str]:
    out = []
    for m in messages:
        if m.role == "tool_result":
            tag = "synth" if m.text() == INTERRUPTED_TEXT and m.is_error else "result"
            out.append(f"{tag}:{m.tool_call_id}")
        else:
            out.append(m.role)
    return out


def test_nothing_to_repair_returns_equal_copy() -> None:
    msgs = [user_message("hi"), assistant(call("a")), result("a"), assistant(text="done")]
    out = repair_tool_calls(msgs)
    assert out == msgs
    assert out is not msgs
    assert all(a is b for a, b in zip(out, msgs, strict=True))
    assert repair_tool_calls([]) == []


def test_input_is_not_modified() -> None:
    msgs = [user_message("go"), assistant(call("a"))]
    before = list(msgs)
    repair_tool_calls(msgs)
    assert msgs == before


def test_spec_example_dangling_call_gets_a_result() -> None:
    go = user_message("go")
    a = assistant(call("call-9", "echo"))
    out = repair_tool_calls([go, a])
    assert len(out) == 3
    assert out[:2] == [go, a]
    assert out[2] == synthesized("call-9", "echo")
    nxt = user_message("next")
    assert repair_tool_calls([go, a, nxt]) == [go, a, synthesized("call-9"), nxt]


def test_synthesized_result_has_exactly_the_spec_fields() -> None:
    out = repair_tool_calls([assistant(call("c7", "fetch"))])
    r = out[1]
    assert {name: getattr(r, name) for name in Message.model_fields} == {
        "role": "tool_result",
        "content": [TextContent(text="tool execution interrupted")],
        "api": None,
        "provider": None,
        "model": None,
        "error": None,
        "usage": None,
        "stop_reason": None,
        "tool_call_id": "c7",
        "tool_name": "fetch",
        "is_error": True,
        "timestamp": T_CALL,
    }
    assert INTERRUPTED_TEXT == "tool execution interrupted"


def test_synthesized_timestamp_is_the_dangling_message_timestamp() -> None:
    later = T_CALL + timedelta(hours=1)
    a = assistant(call("x")).model_copy(update={"timestamp": later})
    assert repair_tool_calls([a])[1].timestamp == later
    untimed = assistant(call("y")).model_copy(update={"timestamp": None})
    assert repair_tool_calls([untimed])[1].timestamp is None
    assert interrupted_result(call("z"), a) == synthesized("z", when=later)


def test_repair_is_deterministic() -> None:
    msgs = [assistant(call("a"), call("b"))]
    assert repair_tool_calls(msgs) == repair_tool_calls(msgs)
    assert [m.model_dump_json() for m in repair_tool_calls(msgs)] == [
        m.model_dump_json() for m in repair_tool_calls(list(msgs))
    ]


def test_missing_results_are_added_in_call_order_after_the_present_ones() -> None:
    a = assistant(call("c1"), call("c2", "other"), call("c3"))
    r2 = result("c2", "other")
    out = repair_tool_calls([a, r2])
    assert out == [a, r2, synthesized("c1"), synthesized("c3")]


def test_only_contiguous_results_count() -> None:
    a = assistant(call("c1"), call("c2"))
    r1 = result("c1")
    interloper = user_message("interrupt")
    late = result("c2")
    out = repair_tool_calls([a, r1, interloper, late])
    # c2's late result is separated by another message: a result is synthesized anyway and the
    # late one stays where it was.
    assert out == [a, r1, synthesized("c2"), interloper, late]


def test_late_result_after_another_assistant_does_not_count() -> None:
    a1 = assistant(call("c1"))
    a2 = assistant(text="thinking out loud", stop="stop")
    late = result("c1")
    out = repair_tool_calls([a1, a2, late])
    assert out == [a1, synthesized("c1"), a2, late]


def test_results_with_unknown_ids_pass_through() -> None:
    a = assistant(call("c1"))
    stranger = result("zzz", "ghost")
    r1 = result("c1")
    out = repair_tool_calls([a, stranger, r1])
    assert out == [a, stranger, r1]
    out2 = repair_tool_calls([a, stranger])
    assert out2 == [a, stranger, synthesized("c1")]


def test_result_without_call_id_does_not_answer() -> None:
    a = assistant(call("c1"))
    anonymous = Message(role="tool_result", content=[TextContent(text="?")])
    assert repair_tool_calls([a, anonymous]) == [a, anonymous, synthesized("c1")]


def test_tool_results_not_after_a_calling_assistant_pass_through() -> None:
    stray = result("c1")
    msgs = [user_message("u"), stray, assistant(text="no calls", stop="stop"), stray]
    assert repair_tool_calls(msgs) == msgs


def test_duplicate_call_ids_count_per_appearance() -> None:
    a = assistant(call("dup"), call("dup"))
    assert repair_tool_calls([a]) == [a, synthesized("dup"), synthesized("dup")]
    one = result("dup")
    assert repair_tool_calls([a, one]) == [a, one, synthesized("dup")]
    two = [a, result("dup", text="1"), result("dup", text="2")]
    assert repair_tool_calls(two) == two


def test_extra_results_for_one_call_do_not_answer_another() -> None:
    a = assistant(call("c1"), call("c2"))
    r1a, r1b = result("c1", text="first"), result("c1", text="again")
    assert repair_tool_calls([a, r1a, r1b]) == [a, r1a, r1b, synthesized("c2")]


def test_server_calls_are_ignored() -> None:
    only_server = assistant(call("s1", "web_search", server=True))
    assert repair_tool_calls([only_server]) == [only_server]
    mixed = assistant(call("s1", "web_search", server=True), call("c1"))
    assert repair_tool_calls([mixed]) == [mixed, synthesized("c1")]


@pytest.mark.parametrize("stop", ["stop", "length", "tool_use", "error", "aborted", None])
def test_stop_reasons_are_ignored(stop: StopReason | None) -> None:
    a = assistant(call("c1"), stop=stop)
    assert repair_tool_calls([a]) == [a, synthesized("c1")]


def test_every_assistant_message_is_repaired_not_only_the_last() -> None:
    a1 = assistant(call("c1"))
    a2 = assistant(call("c2", "two"))
    r2 = result("c2", "two")
    u = user_message("u")
    a3 = assistant(call("c3"))
    out = repair_tool_calls([a1, u, a2, r2, a3])
    assert shape(out) == [
        "assistant",
        "synth:c1",
        "user",
        "assistant",
        "result:c2",
        "assistant",
        "synth:c3",
    ]


def test_error_results_answer_calls() -> None:
    a = assistant(call("c1"))
    err = error_tool_result_message("c1", "echo", "tool execution failed: ValueError: no")
    assert repair_tool_calls([a, err]) == [a, err]


def test_repair_is_idempotent() -> None:
    msgs = [assistant(call("a"), call("b")), result("b"), user_message("u"), assistant(call("c"))]
    once = repair_tool_calls(msgs)
    assert repair_tool_calls(once) == once


# --- dangling_calls (§5.2's detector) ------------------------------------------------------------


def test_dangling_calls_at_the_tail() -> None:
    c1, c2, s = call("c1"), call("c2"), call("s", server=True)
    a = assistant(c1, s, c2)
    assert dangling_calls([user_message("go"), a]) == [c1, c2]
    assert dangling_calls([a, result("c1")]) == [c2]
    assert dangling_calls([a, result("c1"), result("c2")]) == []


def test_dangling_calls_only_at_the_tail() -> None:
    a = assistant(call("c1"))
    assert dangling_calls([a, user_message("later")]) == []
    assert dangling_calls([user_message("u")]) == []
    assert dangling_calls([]) == []
    assert dangling_calls([assistant(text="no calls", stop="stop")]) == []
    assert dangling_calls([result("x")]) == []
