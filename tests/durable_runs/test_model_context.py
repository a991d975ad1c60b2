"""One model context: both executors send the model the same messages for the same path.

In process the loop starts from the model view at the leaf and appends the run's messages; on
Temporal the ``call_model`` activity rebuilds the request from the stored path with
``session.views.run_view``. Both are driven here over the same stored session (a compaction, a
custom entry, a meta message, a dangling call the run repairs) with the same inputs (ephemeral,
meta and custom among them) through a tool turn, and every request the scripted model received
must match, message for message.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client

from durable_agent import (
    CompactionEntry,
    CustomEntry,
    MessageEntry,
    ScriptedModel,
    ephemeral,
    meta,
    model,
    new,
    text,
)
from durable_agent.ai import Reply, TextContent, ToolCall, assistant_message, user_message
from durable_agent.ai.model import ModelRequest
from durable_agent.session import Entry
from durable_agent.stores import MemoryStore
from tests.durable_runs.support import echo
from tests.support.temporal import TemporalHarness

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def seeded() -> list[Entry]:
    """A stored path: a compacted turn, a kept turn, a custom and a meta entry, then an
    assistant message whose call was never answered (run-start repair answers it)."""
    dangling = assistant_message(
        TextContent(text="let me check"), ToolCall(id="call-9", name="echo")
    ).model_copy(update={"timestamp": _at(7)})
    return [
        MessageEntry(id="u1", created_at=_at(1), message=user_message("old question")),
        MessageEntry(
            id="a1",
            parent_id="u1",
            created_at=_at(2),
            message=assistant_message(TextContent(text="old answer")),
        ),
        MessageEntry(id="u2", parent_id="a1", created_at=_at(3), message=user_message("kept")),
        CompactionEntry(
            id="c1",
            parent_id="u2",
            created_at=_at(4),
            summary="the old turn, summarized",
            first_kept_id="u2",
            tokens_before=42,
        ),
        CustomEntry(id="n1", parent_id="c1", created_at=_at(5), kind="note"),
        MessageEntry(
            id="m1", parent_id="n1", created_at=_at(6), message=user_message("hidden"), meta=True
        ),
        MessageEntry(id="a2", parent_id="m1", created_at=_at(7), message=dangling),
    ]


def script() -> ScriptedModel:
    return ScriptedModel(
        [
            Reply(
                text="calling", tool_calls=[ToolCall(id="c1", name="echo", arguments={"text": "x"})]
            ),
            "first run done",
            "second run done",
        ]
    )


def inputs() -> list[list[Entry]]:
    """Two runs' inputs (the same objects for both executors, so their timestamps agree)."""
    return [
        [
            text("A"),
            ephemeral("an ephemeral nudge"),
            meta("meta context"),
            CustomEntry(kind="marker"),
            text("B"),
        ],
        [ephemeral("another nudge"), text("C")],
    ]


def sent(requests: list[ModelRequest]) -> list[dict[str, Any]]:
    """What the model was sent, without the clock fields the executors fill in themselves (the
    replies' and tool results' timestamps)."""
    return [
        {
            "system_prompt": r.system_prompt,
            "tools": [t.model_dump() for t in r.tools],
            "options": r.options,
            "messages": [m.model_dump(exclude={"timestamp"}) for m in r.messages],
        }
        for r in requests
    ]


async def test_both_executors_send_the_model_the_same_messages(temporal_client: Client) -> None:
    runs = inputs()
    local_lm, local_store = script(), MemoryStore()
    await local_store.create_session("context")
    await local_store.append_entries("context", seeded())
    local = await new(
        model(local_lm),
        store=local_store,
        session_id="context",
        tools=(echo,),
        system_prompt="be brief",
    )
    for run in runs:
        await (await local.run(*run)).wait()

    remote_lm, remote_store = script(), MemoryStore()
    await remote_store.create_session("context")
    await remote_store.append_entries("context", seeded())
    async with contextlib.AsyncExitStack() as stack:
        harness = TemporalHarness(temporal_client, stack)
        remote = await harness.open(
            remote_lm,
            store=remote_store,
            session_id="context",
            tools=[echo],
            system_prompt="be brief",
        )
        for run in runs:
            await (await remote.run(*run)).wait()

    assert len(local_lm.requests) == 3
    first = [m.text() for m in local_lm.requests[0].messages]
    assert first == [
        "the old turn, summarized",
        "kept",
        "hidden",
        "let me check",
        "tool execution interrupted",
        "A",
        "an ephemeral nudge",
        "meta context",
        "B",
    ]
    last = [m.text() for m in local_lm.requests[2].messages]
    assert last[-3:] == ["first run done", "another nudge", "C"]
    assert "an ephemeral nudge" not in last  # an ephemeral input lives for its run only
    assert sent(remote_lm.requests) == sent(local_lm.requests)
