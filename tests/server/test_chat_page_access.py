"""The chat page for people without a mouse or a big screen, and on big sessions: every control
reached and used from the keyboard, focus kept where the user is, what a screen reader needs,
and a session of thousands of entries shown in seconds (Playwright driving the system Chromium
against a real server)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from durable_agent import ApprovalDecision, MessageEntry
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.ai.messages import TextContent, assistant_message, user_message
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import lookup, replied, scripted, serving, tool_script
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually

BIG = 3000
"""Entries of a big session: a long conversation, stored (as a few months of use leave it)."""


async def _stored_conversation(store: FileStore, session_id: str, n: int) -> None:
    await store.create_session(session_id)
    entries, parent = [], None
    for i in range(n):
        message = (
            user_message(f"question {i} " + "word " * 20)
            if i % 2 == 0
            else assistant_message(TextContent(text=f"answer {i} " + "text " * 40))
        )
        entry_id = f"{session_id}{i:012x}"
        entries.append(MessageEntry(id=entry_id, parent_id=parent, message=message))
        parent = entry_id
    for start in range(0, n, 500):
        await store.append_entries(session_id, entries[start : start + 500])


async def test_a_big_session_shows_in_seconds_and_stays_usable(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Each stored entry the stream replays used to redraw the whole transcript, each drawing
    scanning every entry for each message's branches: a 1,000-entry session took 35 s to show,
    a 3,000-entry one minutes. Opening one, then another, and asking in it is quick."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await _stored_conversation(store, "bigone", BIG)
    await _stored_conversation(store, "bigtwo", BIG)
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="Hi.")]))})

    def shown(session_id: str) -> Any:
        async def probe() -> bool:
            return bool(
                await page.evaluate(
                    "([sid, n]) => state.sid === sid && state.heard"
                    " && document.querySelectorAll('#chat .msg').length === n",
                    [session_id, BIG],
                )
            )

        return probe

    async with serving(app) as url:
        await page.goto(url + "/#bigone")
        await eventually(shown("bigone"), within=20, interval=0.1, what="the big session")
        await page.evaluate("open('bigtwo')")
        await eventually(shown("bigtwo"), within=20, interval=0.1, what="the other one")
        await page.fill("#text", "and now?")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the reply")
        last = await page.locator("#chat .msg").last.inner_text()
    assert last.startswith("Hi."), last


async def _count(locator: Any, n: int) -> bool:
    return bool(await locator.count() == n)


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


def _three_mails() -> AgentSpec:
    calls = [
        ToolCall(id=f"call-{n}", name="send_email", arguments={"to": to})
        for n, to in enumerate(("ann@example.com", "bob@example.com", "cy@example.com"), 1)
    ]
    replies = [Reply(tool_calls=calls), Reply(text="All done.", chunk_delay=0.05)]
    return AgentSpec(model=scripted(replies), tools=[send_email])


async def test_stop_stops_a_run_waiting_for_approval(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Stop is enabled while calls wait for a decision; it used to cancel only a run that was
    working, so it did nothing then. Pressed from the keyboard, it is disabled once the run
    ended: the focus it had goes to the box, not to the page's start."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": _three_mails()})
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "Mail them.")
        await page.press("#text", "Enter")
        prompts = page.locator(".approval")
        await eventually(lambda: _count(prompts, 3), within=20, interval=0.05, what="prompts")
        await page.focus("#stop")
        await page.keyboard.press("Enter")

        async def stopped() -> bool:
            return bool(await page.evaluate("$('stop').disabled"))

        await eventually(stopped, within=20, interval=0.05, what="the run stopped")
        assert await _focused(page) == "text"
        entries = await store.load_entries(await page.evaluate("state.sid"))
    answers = [e.message.text() for e in entries if isinstance(e, MessageEntry)]
    assert answers[-3:] == ["tool execution cancelled"] * 3, answers


async def _focused(page: Any) -> str:
    """What has the keyboard focus: its ID, else its text, else its placeholder."""
    script = "(a => a.id || a.textContent || a.placeholder || a.tagName)(document.activeElement)"
    return str(await page.evaluate(script))


async def test_a_list_drawn_again_keeps_the_focus_where_the_keyboard_was(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The session list is drawn again when a session is opened, made or gone (and twice as a
    page opens on one). A keyboard user on another session's button was moved to the open
    session's: Tab then Enter opened the wrong one (and this file's keyboard test failed when
    the page's second load of the list came while it tabbed)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    for sid in ("first", "second", "third"):
        await _stored_conversation(store, sid, 2)
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="Hi.")]))})
    async with serving(app) as url:
        await page.goto(url + "/#first")
        chosen = page.get_by_role("button", name="first")
        await eventually(lambda: _current(chosen), within=20, interval=0.05, what="marked")
        await page.get_by_role("button", name="second").focus()
        await page.evaluate("sessions()")  # drawn again, as when another session is made
        assert await _focused(page) == "second"


async def test_sessions_are_opened_and_made_from_the_keyboard(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Tab reaches each session of the list and Enter opens it, focus staying on it (the list
    is drawn again); a new session puts the focus in the box, where Enter sends."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    for sid in ("first", "second"):
        await _stored_conversation(store, sid, 2)
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([Reply(text="Hi.")]))})
    async with serving(app) as url:
        await page.goto(url + "/#first")
        await page.get_by_role("button", name="second").wait_for()  # the list, once it came
        await page.focus("#new")
        for _ in range(4):
            await page.keyboard.press("Tab")
            if await _focused(page) == "second":
                break
        assert await _focused(page) == "second"
        await page.keyboard.press("Enter")

        async def opened() -> bool:
            return bool(await page.evaluate("state.sid === 'second' && state.heard"))

        await eventually(opened, within=20, interval=0.05, what="the second session")
        chosen = page.get_by_role("button", name="second")
        await eventually(lambda: _current(chosen), within=5, interval=0.05, what="marked")
        assert await _focused(page) == "second"
        await page.focus("#new")
        await page.keyboard.press("Enter")

        async def made() -> bool:
            return bool(await page.evaluate("!['first', 'second', null].includes(state.sid)"))

        await eventually(made, within=20, interval=0.05, what="a new session")
        assert await _focused(page) == "text"
        await page.keyboard.type("hello")
        await page.keyboard.press("Enter")
        await eventually(replied(page, "Hi."), within=20, interval=0.1, what="the reply")
        assert await _focused(page) == "text"


async def _current(locator: Any) -> bool:
    return bool(await locator.get_attribute("aria-current") == "true")


async def test_approvals_are_decided_from_the_keyboard(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Approving a call moves the focus to the next prompt, not to the page's start; a reason
    being typed keeps the focus while the chat is drawn again (another person decides another
    call); the last decision puts the focus back in the box."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": _three_mails()})
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await page.goto(url + "/")
        await page.fill("#text", "Mail them.")
        await page.press("#text", "Enter")
        prompts = page.locator(".approval")
        await eventually(lambda: _count(prompts, 3), within=20, interval=0.05, what="prompts")
        await prompts.first.locator("button", has_text="approve").focus()
        await page.keyboard.press("Enter")
        await eventually(lambda: _count(prompts, 2), within=20, interval=0.05, what="decided")
        assert await _focused(page) == "approve"
        assert await page.evaluate("document.activeElement.closest('.approval').dataset.call") == (
            "call-2"
        )
        for _ in range(4):  # call-2's reason and deny, call-3's approve and reason
            await page.keyboard.press("Tab")
        await page.keyboard.type("not now")
        sid = await page.evaluate("state.sid")
        decided = await client.post(f"/v1/sessions/{sid}/approvals/call-2", json={"approved": True})
        assert decided.status_code == 200, decided.text
        await eventually(lambda: _count(prompts, 1), within=20, interval=0.05, what="redrawn")
        await page.keyboard.type(", thanks")
        await page.keyboard.press("Tab")
        assert await _focused(page) == "deny"
        await page.keyboard.press("Space")
        await eventually(replied(page, "All done."), within=20, interval=0.1, what="the reply")
        assert await _focused(page) == "text"
        stored = await store.load_entries(sid)
    denied = [(e.tool_call_id, e.reason) for e in stored if isinstance(e, ApprovalDecision)]
    assert denied[-1] == ("call-3", "not now, thanks"), denied


HEARD = """
window.heard = [];
new MutationObserver((changes) => {
  for (const c of changes) {
    let at = c.target.nodeType === 1 ? c.target : c.target.parentElement;
    at = at && at.closest('[aria-live], [role=status], [role=log], [role=alert]');
    if (at && at.getAttribute('aria-live') !== 'off') window.heard.push(at.textContent);
  }
}).observe(document, { subtree: true, childList: true, characterData: true });
"""
"""What the page's live regions said, change by change (what a screen reader announces)."""

DONE = "All done: the three mails are on their way."


async def test_a_screen_reader_hears_who_said_what_and_each_reply_once(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Who said each message, a queued or live one, the run's status and each prompt have words,
    not only colours; the status is a live region, and a reply is announced once it is stored,
    not token by token (nor the whole transcript again at each redraw)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    calls = [ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})]
    replies = [Reply(tool_calls=calls), Reply(text=DONE, chunk_delay=0.05), Reply(text="Again.")]
    spec = AgentSpec(model=scripted(replies), tools=[send_email])
    app = create_app(store=store, agents={"helper": spec})
    await page.add_init_script(HEARD)
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.get_by_role("textbox", name="Message").fill("Mail Ann.")
        await page.keyboard.press("Enter")
        prompt = page.get_by_role("group", name="send_email")
        await eventually(lambda: _count(prompt, 1), within=20, interval=0.05, what="the prompt")
        status = page.get_by_role("status")
        assert await status.inner_text() == "waiting for your decision"
        await prompt.get_by_role("button", name="approve").click()
        await eventually(replied(page, DONE), within=20, interval=0.1, what="the reply")
        await eventually(lambda: _heard(page, DONE), within=5, interval=0.05, what="announced")
        heard = await page.evaluate("window.heard")
        await page.get_by_role("button", name="retry").click()
        await eventually(replied(page, "Again."), within=20, interval=0.1, what="the retry")
        back = page.get_by_role("group", name="branch").get_by_role("button", name="previous")
        await back.click()
        await eventually(replied(page, DONE), within=5, interval=0.05, what="the first branch")
        chat = await page.locator("#chat").aria_snapshot()
    assert re.search(r"You said:.*previous branch.*Mail Ann\.", chat, re.DOTALL), chat
    assert f"Agent: {DONE}" in chat, chat
    assert "waiting for your decision" in heard, heard
    said = [h for h in heard if "All done" in h]
    assert said == [f"Agent: {DONE}"], said  # once, whole


async def _heard(page: Any, text: str) -> bool:
    return any(text in h for h in await page.evaluate("window.heard"))


async def test_a_streaming_reply_does_not_redraw_the_transcript(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Each piece of live text used to redraw the whole chat: in a 3,000-entry session a reply
    kept the page busy for its whole length (typing lagged seconds). The messages above stay
    as drawn while the reply grows, and a reader at the end follows it."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await _stored_conversation(store, "talk", 40)
    lines = "\n".join(f"line {n} of a long answer" for n in range(200))
    reply = Reply(text=lines, chunk_delay=0.02, chunk_size=16)
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([reply]))})
    async with serving(app) as url:
        await page.set_viewport_size({"width": 900, "height": 500})
        await page.goto(url + "/#talk")
        await eventually(lambda: _count(page.locator("#chat .msg"), 40), within=20, what="shown")
        await page.fill("#text", "tell me at length")
        await page.press("#text", "Enter")
        await page.locator(".msg.live").wait_for()
        await page.evaluate("document.querySelector('#chat .msg').dataset.mark = 'drawn once'")
        grown = await _live_length(page)

        async def longer() -> bool:
            return await _live_length(page) > grown + 200

        await eventually(longer, within=20, interval=0.05, what="the reply growing")
        kept = await page.locator("#chat .msg[data-mark]").count()
        at_end = "c => c.scrollHeight - c.scrollTop - c.clientHeight < 48"
        following = await page.locator("#chat").evaluate(at_end)
        await eventually(replied(page, "line 199"), within=30, interval=0.1, what="the reply")
    assert kept == 1, "the transcript was drawn again while the reply grew"
    assert following, "the reader at the end was left behind"


async def _live_length(page: Any) -> int:
    return int(
        await page.evaluate("(document.querySelector('.msg.live') || {}).textContent?.length || 0")
    )


async def test_a_stored_entry_adds_to_the_chat_not_redraws_it(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Each stored entry used to redraw the whole chat (in a 3,000-entry session about 150 ms
    of blocked page per entry: bench/chat_render_bench.py), so a run storing a turn made it
    sluggish. The messages already shown are the same elements after a turn (a tool's call, its
    result and the reply): only what is new is added."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await _stored_conversation(store, "talk", 40)
    spec = AgentSpec(model=scripted(tool_script("Sunny, they say.")), tools=[lookup])
    app = create_app(store=store, agents={"helper": spec})
    async with serving(app) as url:
        await page.goto(url + "/#talk")
        await eventually(lambda: _count(page.locator("#chat .msg"), 40), within=20, what="shown")
        await page.evaluate("window.drawn = [...document.querySelectorAll('#chat .msg')]")
        await page.fill("#text", "and the weather?")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Sunny, they say."), within=20, what="the reply")
        shown = await page.locator("#chat .msg").count()
        kept = await page.evaluate("window.drawn.map((m, i) => m.isConnected || i)")
    assert shown == 44, shown
    assert kept == [True] * 40, kept
