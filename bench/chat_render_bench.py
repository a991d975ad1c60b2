"""Benchmark: what one stored entry costs the chat page in a long session.

Opens a 3,000-entry session on the chat page (Playwright driving the system Chromium against a
real server), then feeds it 40 more entries the way the stream does (``frame("entry", ...)``),
each followed by the drawing it causes and the layout it forces, and reports the milliseconds
per entry (median and p95). A run streaming a turn stores a few entries a second: at 180 ms each
the page stalls for that long every time.

Run: ``.venv/bin/python bench/chat_render_bench.py [--before REV]``; with ``--before`` the same
session is measured first with the page script of commit REV (``git show``), then with this
tree's, and both are printed side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # tests.server
    sys.path.insert(0, str(ROOT))

from tests.server.support import serving  # noqa: E402
from tests.server.test_chat_page_access import _stored_conversation  # noqa: E402

from durable_agent.ai import Reply, ScriptedModel  # noqa: E402
from durable_agent.server import create_app  # noqa: E402
from durable_agent.stores import FileStore  # noqa: E402
from durable_agent.workflows import AgentSpec  # noqa: E402

SIZE, FED = 3000, 40

FEED = """([n, size]) => {
  const times = [];
  for (let i = 0; i < n; i++) {
    const id = 'fed' + String(i).padStart(13, '0'), t = performance.now();
    const message = i % 2 ? { role: 'assistant', content: [{ type: 'text', text: 'answer ' + i }] }
      : { role: 'user', content: [{ type: 'text', text: 'question ' + i }] };
    const entry = { type: 'message', id, parent_id: state.leaf, message };
    frame('entry', { seq: size + i + 1, entry });
    render(); void $('chat').offsetHeight; // the drawing and the layout it forces
    times.push(performance.now() - t);
  }
  return times;
}"""


async def measure(url: str, pw: Any, scripts: dict[str, str] | None) -> list[float]:
    """Milliseconds per fed entry on the page, its scripts (by file name) replaced by
    ``scripts`` if given."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    browser = await pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
    page = await browser.new_page()
    if scripts is not None:
        old = scripts

        async def served(route: Any) -> None:  # a file REV did not have: an empty script
            name = route.request.url.rsplit("/", 1)[-1]
            await route.fulfill(body=old.get(name, ""), content_type="text/javascript")

        await page.route("**/*.js", served)
    await page.goto(url + "/#long")
    await page.wait_for_function(
        "n => state.heard && document.querySelectorAll('#chat .msg').length === n",
        arg=SIZE,
        timeout=120_000,
    )
    times: list[float] = await page.evaluate(FEED, [FED, SIZE])
    await browser.close()
    return sorted(times)


SCRIPTS = ("stream.js", "app.js")
"""The chat page's scripts."""


def line(label: str, times: list[float]) -> str:
    p95 = times[int(len(times) * 0.95) - 1]
    median = statistics.median(times)
    return f"  {label:<12} median {median:6.1f} ms   p95 {p95:6.1f} ms   max {times[-1]:6.1f} ms"


async def compare(label: str | None, old: dict[str, str] | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = FileStore(Path(tmp))
        await _stored_conversation(store, "long", SIZE)
        spec = AgentSpec(model=ScriptedModel([Reply(text="Hi.")]))
        app = create_app(store=store, agents={"helper": spec})
        async with serving(app) as url, async_playwright() as pw:
            before = await measure(url, pw, old) if old is not None else None
            now = await measure(url, pw, None)
    print(f"{SIZE} entries shown, {FED} more fed: time per entry")
    if before is not None:
        print(line(str(label), before))
    print(line("this tree", now))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--before", metavar="REV", help="also measure the page script of REV")
    args = parser.parse_args()
    old = None
    if args.before:  # the page's scripts at REV (the stream's were in app.js before stream.js)
        old = {}
        for name in SCRIPTS:
            path = f"{args.before}:src/durable_agent/server/static/{name}"
            shown = subprocess.run(["git", "show", path], capture_output=True, text=True)
            if shown.returncode == 0:
                old[name] = shown.stdout
    asyncio.run(compare(args.before, old))


if __name__ == "__main__":
    main()
