"""Patches rebuild every partial a ScriptedModel streams, exactly, by a client's ``DeltaFollower``
(which validates only what each delta changed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from durable_agent.ai import ModelRequest, Reply, ScriptedModel, ToolCall
from durable_agent.ai.messages import Message
from durable_agent.durable.follow import DeltaFollower
from durable_agent.durable.live import DeltaWriter
from durable_agent.session.deltas import Delta, DeltaKey, diff_parts, parts
from durable_agent.stores import FileStore
from durable_agent.stores.memory import MemoryDeltas


def _three_blocks() -> ScriptedModel:
    """A reply streaming a thinking block, a text block and a tool call, three characters a
    delta."""
    return ScriptedModel(
        [
            Reply(
                thinking="hmm, let me think",
                text="hello there, streaming world",
                tool_calls=[ToolCall(id="c1", name="step", arguments={"k": 1})],
                chunk_size=3,
            )
        ]
    )


async def test_patches_rebuild_each_partial_and_the_final_text() -> None:
    model = _three_blocks()
    channel, key = MemoryDeltas(), DeltaKey("s1", "r1", 3)
    follower = DeltaFollower(channel, key.session_id, key.run_id)
    follower.expect(key.turn)
    sent: Message | None = None
    partials: list[Message] = []
    followed: list[Message] = []
    seq = 0
    async for ev in model.stream(ModelRequest()):
        patch = diff_parts(parts(sent), parts(ev.partial))
        if patch is None:
            continue
        seq += 1
        head, size, ops = patch
        await channel.publish(key, Delta(attempt=1, seq=seq, head=head, size=size, ops=ops))
        sent = ev.partial
        partials.append(ev.partial)
        update = await follower.poll()
        assert update is not None and update.message is not None
        followed.append(update.message)
    assert followed == partials
    assert followed[-1].text() == "hello there, streaming world"
    assert any(op == "+" for d in await channel.read(key) for _, op, _ in d.ops)
    await channel.clear(key)
    assert await channel.read(key) == []


async def test_a_writer_reusing_what_it_dumped_rebuilds_each_partial(tmp_path: Path) -> None:
    """The writer dumps only the blocks a partial does not share with the last one it wrote,
    and the head only when a field changed (the final message's usage and stop reason): a
    reader still rebuilds each partial it was offered, exactly, through a FileStore's side file
    written and read inline."""
    model = _three_blocks()
    channel, key = FileStore(tmp_path).live_deltas(), DeltaKey("s1", "r1", 1)
    await FileStore(tmp_path).create_session(key.session_id)
    writer = DeltaWriter(channel, key, 1, every=0.0)
    follower = DeltaFollower(channel, key.session_id, key.run_id)
    follower.expect(key.turn)
    offered: list[Message] = []
    followed: list[Message] = []
    final: Message | None = None
    async for ev in model.stream(ModelRequest()):
        if ev.type == "done":
            final = ev.partial
            break
        writer.offer(ev.partial)
        if ev.partial.content:
            offered.append(ev.partial)
            update = await follower.poll()
            assert update is not None and update.message is not None
            followed.append(update.message)
    assert followed == offered
    assert final is not None and final.usage is not None
    await writer.finish(final)
    last = await follower.poll()
    assert last is not None and last.message == final and follower.final


def test_a_cheap_copy_is_model_copy() -> None:
    """``copied`` (what a reader's updates are made with) gives what ``model_copy`` gives: the
    same fields, the same fields set, and a copy that leaves the original alone."""
    from durable_agent.agent.events import AgentEvent
    from durable_agent.ai.messages import TextContent
    from durable_agent.durable.events import Event
    from durable_agent.durable.partial import copied

    message = Message(role="assistant", content=[TextContent(text="hi")])
    update = AgentEvent.model_construct(type="message_update")
    event = Event.model_construct(type="agent", session_id="s1")
    cases: list[tuple[Any, dict[str, Any]]] = [
        (TextContent(text="hi"), {"text": "hi there"}),
        (message, {"content": [TextContent(text="hi there")]}),
        (update, {"message": message, "restart": False, "delta": "hi"}),
        (event, {"agent": update}),
    ]
    for model, fields in cases:
        before = model.model_dump()
        fast, slow = copied(model, fields), model.model_copy(update=fields)
        assert type(fast) is type(slow)
        assert fast.model_dump() == slow.model_dump()
        assert fast.model_fields_set == slow.model_fields_set
        assert fast.__pydantic_extra__ == slow.__pydantic_extra__
        assert fast.__pydantic_private__ == slow.__pydantic_private__
        assert model.model_dump() == before
