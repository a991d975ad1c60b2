"""What the chat page says of a path that waits for an answer while no run goes, and what its
button does: a question no run was started on, a turn that stopped right after its calls were
decided, a reply cut short (Playwright driving the system Chromium against a real server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from durable_agent import ApprovalDecision, ApprovalRequest, MessageEntry
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.ai.messages import (
    Message,
    TextContent,
    assistant_message,
    user_message,
)
from durable_agent.server import create_app
from durable_agent.session import Entry
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


async def _stored(store: FileStore, sid: str, *entries: Entry) -> list[Entry]:
    await store.create_session(sid)
    chained, parent = [], None
    for n, entry in enumerate(entries):
        chained.append(entry.model_copy(update={"id": f"{sid}-{n}", "parent_id": parent}))
        parent = chained[-1].id
    await store.append_entries(sid, chained)
    return chained


async def _status(page: Any) -> str:
    return str(await page.get_by_role("status").inner_text())


async def _notice(page: Any) -> str:
    notice = page.locator("#chat .unfinished")
    return str(await notice.inner_text()) if await notice.count() else ""


async def _heard(page: Any) -> bool:
    return bool(await page.evaluate("state.heard"))


async def test_a_question_no_run_was_started_on_is_not_said_cut_off(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A question stored through the library (no run started on it) was said to be what a run
    cut off left ("the last run did not finish"): the page cannot know a run ever went, so it
    says the question has no answer yet, and its button answers it (asked once)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await _stored(store, "asked", MessageEntry(message=user_message("Is it Tuesday?")))
    app = create_app(
        store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="Yes.")]))}
    )
    async with serving(app) as url:
        await page.goto(url + "/#asked")
        await eventually(lambda: _heard(page), within=20, interval=0.05, what="the stream")
        await eventually(lambda: _notice(page), within=5, interval=0.05, what="the notice")
        assert "did not finish" not in await _notice(page), await _notice(page)
        assert "did not finish" not in await _status(page), await _status(page)
        assert "no answer yet" in (await _notice(page)).lower()
        await page.get_by_role("button", name="answer").click()
        await eventually(replied(page, "Yes."), within=20, interval=0.1, what="the answer")
        assert await _notice(page) == ""
    said = [
        e.message.text() for e in await store.load_entries("asked") if isinstance(e, MessageEntry)
    ]
    assert said == ["Is it Tuesday?", "Yes."], said


async def test_a_turn_stopped_right_after_its_decision_is_continued(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A run that stopped after the last call was decided, before the call ran, left the page
    with the decision shown and nothing to press. It says the run did not finish, and continue
    carries the decided call out and goes on."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})
    asked = assistant_message(call)
    await _stored(
        store,
        "decided",
        MessageEntry(message=user_message("Mail Ann.")),
        MessageEntry(message=asked),
        ApprovalRequest(
            tool_call_id="call-1", tool_name="send_email", args=call.arguments, run_id="r1"
        ),
        ApprovalDecision(tool_call_id="call-1", approved=True, decided_by="ann"),
    )
    spec = AgentSpec(model=scripted([Reply(text="Mailed Ann.")]), tools=[send_email])
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url:
        await page.goto(url + "/#decided")
        await eventually(lambda: _heard(page), within=20, interval=0.05, what="the stream")
        await eventually(lambda: _notice(page), within=5, interval=0.05, what="the notice")
        assert "did not finish" in await _status(page)
        await page.get_by_role("button", name="continue").click()
        await eventually(replied(page, "Mailed Ann."), within=20, interval=0.1, what="the reply")
    said = [
        e.message.text() for e in await store.load_entries("decided") if isinstance(e, MessageEntry)
    ]
    assert said[-2:] == ["sent to ann@example.com", "Mailed Ann."], said


async def test_continue_goes_on_from_a_reply_cut_short(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Continue after a reply cut short (stopped, or failed mid-way) asked the question again
    from its parent: the cut reply went to a branch of its own, out of the model's view, and
    continue did what retry does. It goes on from the cut reply, which stays on the path."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    cut = Message(
        role="assistant", content=[TextContent(text="The first half")], stop_reason="aborted"
    )
    entries = await _stored(
        store, "cut", MessageEntry(message=user_message("Tell me.")), MessageEntry(message=cut)
    )
    app = create_app(
        store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="and the rest.")]))}
    )
    async with serving(app) as url:
        await page.goto(url + "/#cut")
        await eventually(lambda: _heard(page), within=20, interval=0.05, what="the stream")
        await eventually(lambda: _notice(page), within=5, interval=0.05, what="the notice")
        await page.get_by_role("button", name="continue").click()
        await eventually(replied(page, "and the rest."), within=20, interval=0.1, what="the reply")
        texts = await page.locator(".msg.assistant").all_inner_texts()
        assert await page.locator(".nav").count() == 0
    assert [t.split("\n")[0] for t in texts] == ["The first half", "and the rest."], texts
    stored = await store.load_entries("cut")
    assert stored[-1].parent_id == entries[-1].id
