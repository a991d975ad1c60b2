"""The message boundary (issue 16 items 6 and 7): whatever a tool or a model hands back becomes a
message every store and Temporal can carry, and that reads back as it was answered.

- Lone surrogates (``os.listdir`` on a non-UTF-8 file name) become U+FFFD when the message is
  built, so the result is stored once and the tool runs once, on every store and executor.
- NaN and infinities (numbers JSON has not) become ``null`` when the message is built (a cost
  0), so a tool, every store and both executors see the same ``None``.
- A tool call with an empty ID gets a derived ID before it is stored, so its result still
  answers it after a reload (no second "interrupted" result).
"""

from __future__ import annotations

import pytest

from durable_agent import MessageEntry
from durable_agent.ai import (
    Cost,
    Message,
    Reply,
    RetryPolicy,
    TextContent,
    ToolCall,
    ToolOutput,
    Usage,
    encodable_text,
    error_tool_result_message,
    tool,
    tool_result_message,
    user_message,
    with_call_ids,
)
from durable_agent.session import Store, decode_entry, encode_entry
from tests.support.harness import Harness

FILE_NAME = "report\udcff.txt"
"""What ``os.listdir`` returns for the bytes ``b"report\\xff.txt"``."""
SHOWN = "report\ufffd.txt"


def test_lone_surrogates_become_replacement_characters_in_every_string() -> None:
    call = ToolCall(id="c\udc80", name="ls", arguments={"dir\udcff": [FILE_NAME, {"k": 1}]})
    message = tool_result_message("c1", "ls", TextContent(text=FILE_NAME), call)
    assert message.content[0] == TextContent(text=SHOWN)
    assert message.content[1] == ToolCall(
        id="c\ufffd", name="ls", arguments={"dir\ufffd": [SHOWN, {"k": 1}]}
    )
    message.model_dump_json().encode("utf-8")  # encodable
    # dicts are cleaned too (the slow decode path and user code validate plain data)
    plain = Message.model_validate(
        {"role": "user", "content": [{"type": "text", "text": "x\ud800"}]}
    )
    assert plain.text() == "x\ufffd"
    # error texts (an exception naming the file) as well
    assert error_tool_result_message("c1", "ls", f"no {FILE_NAME}").text() == f"no {SHOWN}"
    assert user_message(FILE_NAME).text() == SHOWN


def test_a_split_surrogate_pair_is_joined_and_clean_text_is_untouched() -> None:
    assert encodable_text("a\ud83d\ude00b") == "a\U0001f600b"
    assert encodable_text("\udcff\udcfe") == "\ufffd\ufffd"
    clean = "naïve — 😀"
    assert encodable_text(clean) is clean
    message = Message(role="user", content=[TextContent(text=clean)])
    assert message.text() == clean


INF, NAN = float("inf"), float("nan")


def test_nan_and_infinities_become_null_and_a_cost_zero() -> None:
    call = ToolCall(id="c1", name="t", arguments={"n": INF, "l": [NAN, 1.5], "d": {"x": -INF}})
    served = ToolCall(id="s1", name="web", server=True, output=ToolOutput(raw={"score": NAN}))
    usage = Usage(input=3, cost=Cost(input=NAN, output=0.5, reasoning=INF))
    message = Message(role="assistant", content=[call, served], usage=usage)
    assert message.content[0] == ToolCall(
        id="c1", name="t", arguments={"n": None, "l": [None, 1.5], "d": {"x": None}}
    )
    assert message.content[1] == served.model_copy(
        update={"output": ToolOutput(raw={"score": None})}
    )
    assert message.usage == Usage(input=3, cost=Cost(output=0.5))
    entry = MessageEntry(id="e1", message=message)
    assert decode_entry(encode_entry(entry)) == entry
    clean = Message(role="assistant", content=[ToolCall(id="c", name="t", arguments={"n": 1.0})])
    assert clean.content[0].arguments == {"n": 1.0}  # type: ignore[union-attr]
    # a cost a store holds as null (written before this rule) reads as 0
    stored = '{"type":"message","id":"e2","created_at":"2026-01-01T00:00:00Z",'
    stored += '"message":{"role":"assistant","content":[],'
    stored += '"usage":{"output":1,"cost":{"input":null}}}}'
    assert decode_entry(stored).message.usage == Usage(output=1)  # type: ignore[union-attr]


async def test_a_call_with_an_infinity_reaches_the_tool_as_it_is_stored(
    harness: Harness, store: Store
) -> None:
    seen: list[object] = []

    @tool
    async def scale(n: float | None = None) -> str:
        """Scales by ``n``."""
        seen.append(n)
        return f"n={n}"

    script: list[Reply | str] = [Reply.call("scale", {"n": INF}, id="c1"), "scaled"]
    agent = await harness.open(script, store=store, session_id="inf", tools=[scale])
    messages = await (await agent.run("scale it")).wait()
    assert seen == [None]
    assert [m.text() for m in messages] == ["", "n=None", "scaled"]
    stored = [e.message for e in await store.load_entries("inf") if isinstance(e, MessageEntry)]
    assert stored[1].tool_calls()[0].arguments == {"n": None}


async def test_a_result_with_lone_surrogates_is_stored_once_and_the_tool_runs_once(
    harness: Harness, store: Store
) -> None:
    runs: list[str] = []

    @tool
    async def listdir() -> str:
        """Lists a directory holding a file whose name is not UTF-8."""
        runs.append("ran")
        return f"files: {FILE_NAME}"

    script: list[Reply | str] = [Reply.call("listdir", id="c1"), "listed"]
    agent = await harness.open(script, store=store, session_id="surrogates", tools=[listdir])
    messages = await (await agent.run("list it")).wait()

    assert runs == ["ran"]
    assert [m.text() for m in messages] == ["", f"files: {SHOWN}", "listed"]
    stored = await store.load_entries("surrogates")
    results = [e.message for e in stored if isinstance(e, MessageEntry) and e.message.tool_call_id]
    assert [(r.text(), r.is_error) for r in results] == [(f"files: {SHOWN}", False)]
    for entry in stored:
        assert decode_entry(encode_entry(entry).encode("utf-8")) == entry
    reopened = await harness.open([], store=store, session_id="surrogates")
    assert [m.text() for m in reopened.messages()][1:3] == ["", f"files: {SHOWN}"]


async def test_a_failing_tool_naming_an_unencodable_file_is_answered_once(
    harness: Harness, store: Store
) -> None:
    runs: list[str] = []

    @tool(retry=RetryPolicy(max_attempts=1))
    async def remove() -> str:
        """Fails with the file name in the error."""
        runs.append("ran")
        raise FileNotFoundError(f"no such file: {FILE_NAME}")

    script: list[Reply | str] = [Reply.call("remove", id="c1"), "gone"]
    agent = await harness.open(script, store=store, session_id="surrogate-error", tools=[remove])
    messages = await (await agent.run("remove it")).wait()

    assert runs == ["ran"]
    assert messages[1].is_error
    assert SHOWN in messages[1].text() and "FileNotFoundError" in messages[1].text()
    stored = [e for e in await store.load_entries("surrogate-error") if isinstance(e, MessageEntry)]
    assert [e.message.text() for e in stored][2] == messages[1].text()


def test_calls_without_an_id_get_a_derived_one() -> None:
    message = Message(
        role="assistant",
        content=[
            TextContent(text="two calls"),
            ToolCall(id="", name="a"),
            ToolCall(id="keep", name="b"),
            ToolCall(id="", name="c"),
        ],
    )
    stamped = with_call_ids(message, "entry-1")
    ids = [c.id for c in stamped.tool_calls()]
    assert ids[1] == "keep" and ids[0].startswith("call_") and len(ids[0]) == 21
    assert len(set(ids)) == 3
    assert with_call_ids(message, "entry-1") == stamped  # deterministic: a retry derives the same
    assert with_call_ids(message, "entry-2") != stamped
    assert with_call_ids(message) == with_call_ids(message)  # seeded by the message itself
    assert with_call_ids(stamped) is stamped


@pytest.mark.parametrize("reopen", [False, True])
async def test_a_call_with_an_empty_id_is_answered_after_a_reload(
    harness: Harness, store: Store, reopen: bool
) -> None:
    runs: list[str] = []

    @tool
    async def ping() -> str:
        """Answers pong."""
        runs.append("ran")
        return "pong"

    session = f"empty-call-id-{reopen}"
    script: list[Reply | str] = [Reply.call("ping", id=""), "done"]
    agent = await harness.open(script, store=store, session_id=session, tools=[ping])
    await (await agent.run("ping it")).wait()
    assert runs == ["ran"]

    stored = [e.message for e in await store.load_entries(session) if isinstance(e, MessageEntry)]
    assert [m.role for m in stored] == ["user", "assistant", "tool_result", "assistant"]
    (call,) = stored[1].tool_calls()
    assert call.id.startswith("call_")
    assert stored[2].tool_call_id == call.id

    view = (await harness.open([], store=store, session_id=session)) if reopen else agent
    messages = view.messages()
    assert [m.role for m in messages] == ["user", "assistant", "tool_result", "assistant"]
    assert [m.text() for m in messages if m.role == "tool_result"] == ["pong"]
