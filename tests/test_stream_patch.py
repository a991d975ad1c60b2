"""Patches rebuild every partial a ScriptedModel streams, exactly: by ``apply_patch``, and by a
client's ``DeltaFollower`` (which validates only what each delta changed)."""

from __future__ import annotations

from typing import Any

from durable_agent.ai import ModelRequest, Reply, ScriptedModel, ToolCall
from durable_agent.ai.messages import Message
from durable_agent.durable.follow import DeltaFollower
from durable_agent.session.deltas import Delta, DeltaKey, apply_patch, diff_patch
from durable_agent.stores.memory import MemoryDeltas


async def test_patches_rebuild_each_partial_and_the_final_text() -> None:
    model = ScriptedModel(
        [
            Reply(
                thinking="hmm, let me think",
                text="hello there, streaming world",
                tool_calls=[ToolCall(id="c1", name="step", arguments={"k": 1})],
                chunk_size=3,
            )
        ]
    )
    channel, key = MemoryDeltas(), DeltaKey("s1", "r1", 3)
    follower = DeltaFollower(channel, key.session_id, key.run_id)
    follower.expect(key.turn)
    sent: Message | None = None
    partials: list[Message] = []
    followed: list[Message] = []
    seq = 0
    async for ev in model.stream(ModelRequest()):
        patch = diff_patch(sent, ev.partial)
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
    state_head: dict[str, Any] = {}
    blocks: list[dict[str, Any]] = []
    rebuilt: list[Message] = []
    for delta in await channel.read(key):
        state_head, blocks, message = apply_patch(state_head, blocks, delta)
        rebuilt.append(message)
    assert rebuilt == partials
    assert rebuilt[-1].text() == "hello there, streaming world"
    assert any(op == "+" for d in await channel.read(key) for _, op, _ in d.ops)
    await channel.clear(key)
    assert await channel.read(key) == []
