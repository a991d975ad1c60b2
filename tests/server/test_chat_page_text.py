"""The chat page shows what people and models write as text, whatever it holds, and reads the
event stream however the network cuts it (Playwright driving the system Chromium against a real
server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from durable_agent.ai import Reply
from durable_agent.server import create_app
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import replied, scripted, serving
from tests.server.test_chat_page import browser_page  # noqa: F401  (the fixture)
from tests.support.polling import eventually

CUT_AT_CR = """
(() => {
  // the network may hand the stream over in pieces cut anywhere: here right after each CR,
  // so every CRLF the server ends a line with arrives in two reads
  const fetched = window.fetch;
  window.fetch = async (...args) => {
    const r = await fetched(...args);
    if (!String(args[0]).endsWith("/stream") || !r.body) return r;
    const cut = new TransformStream({
      transform(chunk, out) {
        let from = 0;
        for (let i = 0; i < chunk.length; i++) {
          if (chunk[i] === 13) { out.enqueue(chunk.slice(from, i + 1)); from = i + 1; }
        }
        if (from < chunk.length) out.enqueue(chunk.slice(from));
      },
    });
    return new Response(r.body.pipeThrough(cut), { status: r.status, headers: r.headers });
  };
})();
"""

HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script> \u202eRTL e\u0301'


async def test_a_stream_cut_between_cr_and_lf_loses_no_entry(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """The server ends each line with CRLF; a read that ended between the two made the page
    see an empty line there, cut the event in two, and drop the entry (its ``data`` read as
    an unnamed event). A reply holding markup, a right-to-left override and a combining mark
    is shown as that text, nothing of it run."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text=f"First. {HOSTILE}"), Reply(text="Second.")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    await page.add_init_script(CUT_AT_CR)
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "hello")
        await page.press("#text", "Enter")
        await eventually(replied(page, "First."), within=30, interval=0.1, what="the reply")
        await page.fill("#text", "again")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Second."), within=30, interval=0.1, what="the reply")
        users = await page.locator(".msg.user").all_inner_texts()
        shown = await page.locator(".msg.assistant:not(.live)").all_inner_texts()
        assert await page.evaluate("window.pwned") is None
    assert [u.split("\n")[0] for u in users] == ["hello", "again"]
    assert shown == [f"First. {HOSTILE}", "Second."]


async def test_a_reply_cut_at_the_token_limit_says_so(
    tmp_path: Path,
    browser_page: Any,  # noqa: F811
) -> None:
    """A reply the model's token limit stopped (a tool call cut there is left out of it) says
    why it ends there, as one stopped or failed does; before, it ended silently."""
    page, store = browser_page, FileStore(tmp_path / "sessions")
    replies = [Reply(text="Writing the fi", stop_reason="length")]
    app = create_app(store=store, agents={"helper": AgentSpec(model=scripted(replies))})
    async with serving(app) as url:
        await page.goto(url + "/")
        await page.fill("#text", "write it")
        await page.press("#text", "Enter")
        await eventually(replied(page, "Writing the fi"), within=30, interval=0.1, what="reply")
        shown = await page.locator(".msg.assistant:not(.live)").all_inner_texts()
    assert shown == ["Writing the fi\n(cut at the model's token limit)"]
