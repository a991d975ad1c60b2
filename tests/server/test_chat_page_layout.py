"""The chat page's layout with a long session, on a desktop window and a phone's: the page itself
never scrolls (only its chat does), so the header (status, Stop), the box and a call's approve
and deny buttons stay on screen; a call's arguments show once, as it ran (Playwright driving the
system Chromium against a real server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from durable_agent import ApprovalDecision, ApprovalRequest, Entry, MessageEntry
from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.ai.messages import (
    Message,
    TextContent,
    assistant_message,
    tool_result_message,
    user_message,
)
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
TURNS = 30
UNSCROLLED = (
    "[document.documentElement.scrollWidth, document.documentElement.scrollHeight,"
    " innerWidth, innerHeight]"
)


async def _stored_turns(store: FileStore, session_id: str) -> None:
    """``TURNS`` questions and answers, stored as a few weeks of use leave them."""
    await store.create_session(session_id)
    entries, parent = [], None
    for i in range(2 * TURNS):
        message = (
            user_message(f"question {i} " + "word " * 12)
            if i % 2 == 0
            else assistant_message(TextContent(text=f"answer {i} " + "text " * 40))
        )
        entry_id = f"{session_id}{i:012x}"
        entries.append(MessageEntry(id=entry_id, parent_id=parent, message=message))
        parent = entry_id
    await store.append_entries(session_id, entries)


def _shown(page: Any, n: int) -> Any:
    async def probe() -> bool:
        script = "n => state.heard && document.querySelectorAll('#chat .msg').length >= n"
        return bool(await page.evaluate(script, n))

    return probe


async def test_the_page_never_scrolls_only_its_chat(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Each message's words for a screen reader ("You said: ", positioned out of sight) were
    placed against the page, not the chat: a 30-turn session made the page itself thousands
    of pixels tall behind the chat, and a mouse wheel over the session list scrolled the whole
    page (header, chat and box) away, leaving a blank window."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await _stored_turns(store, "long")
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([]))})
    async with serving(app) as url:
        await page.set_viewport_size(DESKTOP)
        await page.goto(url + "/#long")
        await eventually(_shown(page, 2 * TURNS), within=20, interval=0.1, what="the session")
        width, height, inner_width, inner_height = await page.evaluate(UNSCROLLED)
    assert (width, height) == (inner_width, inner_height)


@tool(approval=True)
async def send_email(to: str, body: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}: {body}"


def _mailer(body: str) -> AgentSpec:
    call = ToolCall(
        id="call-1", name="send_email", arguments={"to": "ann@example.com", "body": body}
    )
    return AgentSpec(
        model=scripted([Reply(tool_calls=[call]), Reply(text="Sent.")]), tools=[send_email]
    )


async def _inside(page: Any, selector: str) -> bool:
    """Whether ``selector``'s first element is wholly inside the window."""
    box = await page.locator(selector).first.bounding_box()
    size = page.viewport_size
    return bool(
        box
        and box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= size["width"]
        and box["y"] + box["height"] <= size["height"]
    )


async def test_on_a_phone_the_header_the_box_and_a_prompt_stay_on_screen(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """On a phone's width the sessions go above the chat, and the chat grew as tall as all its
    messages: the page scrolled as one 15,000-pixel column, opened at the first question, the
    header (the status line, Stop) scrolled away above, a call's approve and deny buttons and the
    box far below. Now the chat scrolls between header and box, following its end."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    await _stored_turns(store, "long")
    app = create_app(store=store, agents={"helper": _mailer("Hello.")})
    async with serving(app) as url:
        await page.set_viewport_size(PHONE)
        await page.goto(url + "/#long")
        await eventually(_shown(page, 2 * TURNS), within=20, interval=0.1, what="the session")
        await page.fill("#text", "mail ann")
        await page.press("#text", "Enter")
        prompt = page.locator(".approval")
        await eventually(prompt.count, within=20, interval=0.1, what="the prompt")
        for control in (
            "#status",
            "#stop",
            ".approval button",
            ".approval .reason",
            "#text",
            "#send",
        ):
            assert await _inside(page, control), control
        assert await page.locator("#status").inner_text() == "waiting for your decision"
        width, height, inner_width, inner_height = await page.evaluate(UNSCROLLED)
        assert (width, height) == (inner_width, inner_height)
        await page.locator(".approval button", has_text="approve").click()
        await eventually(replied(page, "Sent."), within=20, interval=0.1, what="the reply")
        assert await _inside(page, "#chat .msg >> nth=-1")


def _height(page: Any, selector: str) -> Any:
    return page.locator(selector).first.evaluate("e => e.getBoundingClientRect().height")


async def test_a_long_tool_argument_or_result_keeps_to_a_box_of_its_own(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A call with 5 kB of arguments was shown in full twice (the reply's call and its prompt),
    each longer than a phone's screen, and its 5 kB result a third time: the prompt's approve and
    deny buttons came two screens below where it began. Each now scrolls in a box of its own,
    the prompt with its buttons on one screen, the text all there (and the call shown once)."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    body = " ".join(f"line {n} of the letter" for n in range(250))  # 5 kB
    app = create_app(store=store, agents={"helper": _mailer(body)})
    async with serving(app) as url:
        await page.set_viewport_size(PHONE)
        await page.goto(url + "/")
        await page.fill("#text", "mail ann the letter")
        await page.press("#text", "Enter")
        prompt = page.locator(".approval")
        await eventually(prompt.count, within=20, interval=0.1, what="the prompt")
        chat = await _height(page, "#chat")
        assert await _inside(page, ".approval")
        # the call shown once, in its prompt: its reply, of that call only, is not an empty box
        assert await page.locator(".msg.assistant:visible").count() == 0
        assert "line 249 of the letter" in await prompt.inner_text()
        await page.locator(".approval button", has_text="approve").click()
        await eventually(replied(page, "Sent."), within=20, interval=0.1, what="the reply")
        for shown in (".decision", ".msg.tool"):
            assert await _height(page, shown) < chat / 3, shown
        width, height, inner_width, inner_height = await page.evaluate(UNSCROLLED)
        assert (width, height) == (inner_width, inner_height)


async def test_a_call_waiting_for_a_person_shows_its_arguments_once(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A call needing approval was shown in full in its reply's calls and again in its prompt
    (then in its decision), two wrapped copies one under the other on a phone. Its prompt, then
    its decision, shows it; the reply keeps only the calls no one is asked about. The reply is
    drawn before its request comes (here stored after the page opened), and drawn again then."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    mail = ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})
    look = ToolCall(id="call-2", name="lookup", arguments={"name": "Carol"})
    await store.create_session("asks")
    asked = [
        MessageEntry(id="asks-0", message=user_message("Mail Ann, look Carol up.")),
        MessageEntry(id="asks-1", parent_id="asks-0", message=assistant_message(mail, look)),
    ]
    await store.append_entries("asks", asked)
    calls = page.locator(".msg.assistant .tools")
    args = '"to":"ann@example.com"'

    async def shown(what: str, n: int) -> bool:
        return bool((await page.locator("#chat").inner_text()).count(what) == n)

    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([]))})
    async with serving(app) as url:
        await page.set_viewport_size(PHONE)
        await page.goto(url + "/#asks")
        await eventually(lambda: shown("→ send_email", 1), within=20, interval=0.05, what="calls")
        request = ApprovalRequest(
            id="asks-2",
            parent_id="asks-1",
            tool_call_id="call-1",
            tool_name="send_email",
            args=mail.arguments,
            run_id="r1",
        )
        await store.append_entries("asks", [request])
        await eventually(page.locator(".approval").count, within=20, interval=0.05, what="prompt")
        assert await shown(args, 1)  # drawn with the prompt
        assert await calls.all_inner_texts() == ['→ lookup({"name":"Carol"})']
        assert await page.get_by_role("group", name="send_email").count() == 1
        decision = ApprovalDecision(
            id="asks-3",
            parent_id="asks-2",
            tool_call_id="call-1",
            approved=True,
            decided_by="ann",
        )
        await store.append_entries("asks", [decision])
        await eventually(page.locator(".decision").count, within=20, interval=0.05, what="decided")
        assert await shown(args, 1)
        assert await calls.all_inner_texts() == ['→ lookup({"name":"Carol"})']


async def test_a_call_approved_with_edited_arguments_shows_the_ones_it_ran_with(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A call approved with edited arguments (``"args"`` on the approve route) ran with them,
    but its decision line showed the model's as the call, approved, nothing said of the edit.
    It shows the call as it ran and the arguments it was asked with, each once."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    app = create_app(store=store, agents={"helper": _mailer("Hello.")})
    asked, ran = '"to":"ann@example.com"', '"to":"cfo@example.com"'
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        await page.goto(url + "/")
        await page.fill("#text", "mail ann")
        await page.press("#text", "Enter")
        await eventually(page.locator(".approval").count, within=20, interval=0.1, what="prompt")
        sid = (await page.inner_text("#title")).strip()
        edited = {"to": "cfo@example.com", "body": "Hello."}
        answer = await client.post(
            f"/v1/sessions/{sid}/approvals/call-1", json={"approved": True, "args": edited}
        )
        assert answer.status_code == 200, answer.text
        await eventually(replied(page, "Sent."), within=20, interval=0.1, what="the reply")
        decided = await page.locator(".decision").inner_text()
        tool = await page.locator(".msg.tool").inner_text()
        chat = await page.locator("#chat").inner_text()
    assert decided.startswith(f'send_email({{{ran},"body":"Hello."}}) approved by local'), decided
    assert f'edited from {{{asked},"body":"Hello."}}' in decided, decided
    assert "sent to cfo@example.com" in tool, tool
    assert (chat.count(asked), chat.count(ran)) == (1, 1), chat


async def test_a_call_id_used_again_in_a_later_reply_gets_its_own_prompt(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """Some models number their calls per reply (``call_0`` every time). The page matched
    decisions and results to calls by call ID over the whole path: the later call, waiting,
    showed the earlier one's decision ("approved by ann") and no approve button. Each request
    now takes the decision and result that follow it."""
    page, store = browser_page, FileStore(tmp_path / "sessions")

    def mail(to: str) -> ToolCall:
        return ToolCall(id="call-0", name="send_email", arguments={"to": to})

    def said(message: Message) -> Entry:
        return MessageEntry(message=message)

    answered = tool_result_message("call-0", "send_email", TextContent(text="sent to ann"))
    turns: list[Entry] = [
        said(user_message("Mail Ann.")),
        said(assistant_message(mail("ann@example.com"))),
        ApprovalRequest(tool_call_id="call-0", tool_name="send_email", args={}, run_id="r1"),
        ApprovalDecision(tool_call_id="call-0", approved=True, decided_by="ann"),
        said(answered),
        said(assistant_message(TextContent(text="Sent to Ann."))),
        said(user_message("Now mail Bob.")),
        said(assistant_message(mail("bob@example.com"))),
        ApprovalRequest(tool_call_id="call-0", tool_name="send_email", args={}, run_id="r2"),
    ]
    await store.create_session("again")
    parent: str | None = None
    for i, item in enumerate(turns):
        entry = item.model_copy(update={"id": f"again-{i}", "parent_id": parent})
        await store.append_entries("again", [entry])
        parent = entry.id
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted([]))})
    async with serving(app) as url:
        await page.goto(url + "/#again")
        prompt = page.locator(".approval button", has_text="approve")
        await eventually(prompt.count, within=20, interval=0.05, what="the later call's prompt")
        assert await prompt.count() == 1
        assert await page.locator(".decision").count() == 1  # the earlier call's, approved
        assert "approved by ann" in await page.locator(".decision").inner_text()
