"""``durable-agent demo`` end to end: the whole story, its cleanup, and a second run.

The first run is a plain subprocess with its output checked step by step; the second runs in a
terminal (pexpect) with ``--keep`` so the Temporal Web UI's API can be asked for the session's runs
(both runs' sessions: the SQLite file is reused across servers), then Ctrl-C ends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pexpect
import pytest

from durable_agent.cli.processes import free_port, spawn
from durable_agent.session.entries import MessageEntry
from durable_agent.stores import FileStore
from tests.cli.support import CLI, cli_env, in_order, plain, run_cli, wait_dead
from tests.support.polling import wait_until

pytestmark = pytest.mark.temporal

ROOT = Path(__file__).resolve().parents[2]

STEPS = [
    "offline ScriptedModel",
    "Temporal dev server",
    "Worker 1 (pid",
    "1 · A streamed turn, in process",
    "you ▸ Hi! What can you do?",
    "assistant ▸ Hello! I am a durable agent.",
    "✓ stored reply",
    "2 · The same session resumed on Temporal",
    "✓ stored input",
    "assistant ▸ → get_weather",
    "⚙ tool get_weather",
    "↳ get_weather: Paris: 18°C, light rain",
    "✓ stored tool result",
    "Take an umbrella.",
    "live updates came from the worker's delta channel",
    "3 · A worker killed mid-run",
    "⚙ tool crunch_numbers",
    "✗ SIGKILL worker",
    "replacement worker",
    "↳ crunch_numbers: Q3 total: 1,284,500 EUR",
    "attempt 2",
    "✓ run finished",
    "4 · A branch: edit the last question",
    "leaf moved",
    "Q4 is not closed yet",
    "5 · A fork",
    "-fork (parent demo-",
    "Note for the team: Paris: 18°C, light rain.",
    "6 · A compaction",
    "stored compaction",
    "summary ▸ Summary:",
    "From my compacted notes",
    "7 · Approvals and messages while the agent works",
    "you ▸ Email the Q3 figures to the team.",
    "⏸ send_email(",
    "you, while it waits ▸ Also check the weather in Lisbon.",
    "✓ approved",
    "↳ send_email: email to team@example.com sent",
    "✉ delivered into the run: Also check the weather in Lisbon.",
    "⚙ tool get_weather",
    "Lisbon",
    "you ▸ Email the Q3 figures to the board.",
    "✗ denied",
    "not before the audit",
    "↳ send_email: tool call denied: not before the audit",
    "I did not send it",
    "8 · The transcript tree",
    "⑂ branch",
    "(active)",
    "◀ leaf",
    "9 · Inspect the runs in the Temporal Web UI",
    "/namespaces/default/workflows?query=DurableAgentSessionId%3D%22demo-",
    "Cleaning up",
    "stopped worker",
    "stopped Temporal server",
    "Demo complete",
]


def _pids(output: str) -> list[int]:
    found = re.findall(r"Temporal dev server (\d+) up", output)
    found += re.findall(r"Worker \d+ \(pid (\d+)\)", output)
    return [int(p) for p in found]


ARTIFACTS = Path(os.environ.get("DURABLE_AGENT_ARTIFACTS") or ROOT / ".artifacts")


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("the UI screenshot needs Chromium: apt-get install chromium", pytrace=False)


def _browse(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on the Temporal UI; the virtual-time budget lets its JS fetch and render
    the run list before the screenshot or DOM dump is taken."""
    return subprocess.run(
        [
            _chromium(),
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,900",
            "--virtual-time-budget=15000",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _screenshot_ui(url: str, session_id: str, run_ids: list[str]) -> Path:
    """Save a PNG of the UI's run list for the session, and check the page really lists them."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"temporal-ui-{session_id}.png"
    made = _browse(url, f"--screenshot={shot}")
    assert made.returncode == 0 and shot.stat().st_size > 10_000, made.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    dom = _browse(url, "--dump-dom").stdout
    missing = [w for w in run_ids if w not in dom]
    assert not missing, f"the UI page does not list {missing}"
    return shot


def _ui_runs(ui_url: str, session_id: str) -> list[dict[str, Any]]:
    query = urllib.parse.quote(f'DurableAgentSessionId="{session_id}"')
    url = f"{ui_url}/api/v1/namespaces/default/workflows?query={query}"
    with urllib.request.urlopen(url, timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return list(data.get("executions", []))


async def _check_store(data_home: Path, session_id: str) -> None:
    store = FileStore(data_home / "durable-agent" / "sessions")
    entries = await store.load_entries(session_id)
    users = [
        e.message.text()
        for e in entries
        if isinstance(e, MessageEntry) and e.message.role == "user"
    ]
    assert "Crunch the Q3 sales numbers, please." in users
    assert "Crunch the Q4 numbers instead." in users
    results = [
        e.message.text()
        for e in entries
        if isinstance(e, MessageEntry) and e.message.tool_name == "crunch_numbers"
    ]
    assert len(results) == 1, "the killed attempt stored nothing; the retry stored one result"
    fork = await store.load_session(f"{session_id}-fork")
    assert fork.parent_id == session_id


def found(pattern: str, text: str) -> str:
    """The first group of ``pattern``'s first match in ``text`` (which must have one)."""
    match = re.search(pattern, text)
    assert match is not None, f"{pattern!r} not in {text!r}"
    return match.group(1)


def test_demo_twice(tmp_path: Path) -> None:
    env = cli_env(tmp_path, DURABLE_AGENT_DEMO_TOOL_SECONDS="3")
    t0 = time.monotonic()
    first = run_cli(["demo"], env, timeout=170)
    wall = time.monotonic() - t0
    output = first.stdout + first.stderr
    assert first.returncode == 0, output
    assert in_order(first.stdout, STEPS) == [], first.stdout
    assert wall < 150, f"the demo took {wall:.0f} s"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (artifact := ARTIFACTS / "demo-output.txt").write_text(first.stdout)

    # the replacement worker, not the killed one, produced the tool result
    killed = int(found(r"SIGKILL worker (\d+)", output))
    replacement = int(found(r"replacement worker (\d+)", output))
    assert f"on worker {replacement}, attempt 2" in output
    assert killed != replacement
    # the Temporal reply streamed live from the worker (docs/design.md#live-deltas)
    live = re.search(r"(\d+) live updates came from the worker", output)
    assert live is not None and int(live.group(1)) >= 1, output
    # everything it started is gone
    assert wait_dead(_pids(output)) == []
    session_id = found(r"Session (demo-[0-9a-f]+)", output)
    asyncio.run(_check_store(tmp_path, session_id))

    # second run: same data directory, new session, kept up to look at the UI
    child = pexpect.spawn(
        CLI[0],
        [*CLI[1:], "demo", "--keep"],
        env=env,
        encoding="utf-8",
        timeout=170,
        dimensions=(50, 220),
    )
    try:
        child.expect("press Ctrl-C")
        second = plain(child.before or "")
        second_id = found(r"Session (demo-[0-9a-f]+)", second)
        assert second_id != session_id
        ui_url = found(r"(http://127\.0\.0\.1:\d+)/namespaces/", second)
        runs = _ui_runs(ui_url, second_id)
        assert len(runs) >= 5, runs
        page = found(r"(http://127\.0\.0\.1:\d+/namespaces/\S+)", second)
        run_ids = [
            r["execution"]["workflowId"] for r in runs if "/run/" in r["execution"]["workflowId"]
        ]
        shot = _screenshot_ui(page, second_id, run_ids)
        earlier = _ui_runs(ui_url, session_id)
        assert earlier, "the first run's workflows survive in the reused server database"
        child.sendintr()
        child.expect(pexpect.EOF, timeout=60)
        tail = plain(child.before or "")
    finally:
        child.close(force=True)  # SIGHUP first: the demo cleans up even when a check failed
    assert child.exitstatus == 0, tail
    assert "stopped Temporal server" in tail
    assert wait_dead(_pids(second)) == []
    print(f"demo wall time {wall:.1f} s; output in {artifact}; UI screenshot in {shot}")


def _wait_for_text(path: Path, text: str, within: float) -> str:
    def probe() -> str | None:
        content = path.read_text()
        return content if text in content else None

    return wait_until(probe, within=within, what=f"{text!r} in {path}")


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_interrupted_demos_clean_up(tmp_path: Path) -> None:
    import signal

    env = cli_env(tmp_path, DURABLE_AGENT_DEMO_TOOL_SECONDS="3")
    info = tmp_path / "durable-agent" / "server.json"

    # Ctrl-C mid-story: everything it started stops, exit code 130
    child = pexpect.spawn(
        CLI[0], [*CLI[1:], "demo"], env=env, encoding="utf-8", timeout=120, dimensions=(50, 220)
    )
    try:
        child.expect("2 · The same session")
        started = plain(child.before or "")
        child.sendintr()
        child.expect(pexpect.EOF, timeout=60)
    finally:
        child.close(force=True)
    assert child.exitstatus == 130
    assert wait_dead(_pids(started)) == []
    assert not info.exists()

    # SIGKILL mid-story: the worker sees its parent gone, the kernel stops the server (pdeathsig)
    log = tmp_path / "killed.out"
    with log.open("w") as out:
        proc = subprocess.Popen([*CLI, "demo"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        output = _wait_for_text(log, "2 · The same session", 120)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert wait_dead(_pids(output)) == []

    # a server left running some other way (no setpriv, another OS) is stopped by the next run
    root = tmp_path / "durable-agent"
    orphan = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "temporal"),
            *("server", "start-dev", "--headless", "--ip", "127.0.0.1"),
            *("--port", str(orphan_port := free_port())),
            *("--db-filename", str(root / "temporal.db"), "--log-level", "error"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(
            lambda: _listening(orphan_port), within=30, what=f"port {orphan_port}"
        )  # a real orphan is a server that is up
        assert orphan.poll() is None
        info.write_text(
            json.dumps(
                {
                    "pid": orphan.pid,
                    "owner_pid": 2**22 + 7,
                    "address": "127.0.0.1:1",
                    "ui_url": "",
                    "task_queue": "q",
                }
            )
        )
        again = run_cli(["demo"], env, timeout=170)
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"Stopped Temporal server {orphan.pid}, left behind" in again.stdout
        assert orphan.wait(10) is not None
        assert wait_dead(_pids(again.stdout)) == []
    finally:
        if orphan.poll() is None:
            orphan.kill()
            orphan.wait()


def test_a_port_race_logged_above_a_long_failure_is_in_its_error(tmp_path: Path) -> None:
    """A dev server that lost its port between the CLI's check and its bind logs the bind error
    and then panics (its Web UI's listener is nil), a stack longer than the log's end the error
    quotes: the error showed only the panic, so the dev server took it for another failure and
    did not start again on other ports (and a user saw no cause)."""
    bind = "Failed to start gRPC listener: listen tcp 127.0.0.1:7233: bind: address already in use"
    script = f"echo '{bind}'; for i in $(seq 60); do echo \"panic frame $i\"; done; exit 2"
    proc = spawn("Temporal server", ["sh", "-c", script], tmp_path / "t.log", dict(os.environ))
    proc.proc.wait(timeout=30)
    message = str(proc.exited())
    assert "exited with code 2" in message
    assert bind in message and "panic frame 60" in message
    assert "panic frame 1\n" not in message  # the end of the log, after the cause


async def test_a_port_taken_after_its_check_is_picked_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between the check that a port is free and the server's bind, another process may take it
    (a second demo, a test's dev server starting at the same moment): the server comes up on
    ports the kernel picks instead of failing. With its Web UI, the server's log ends in a Go
    panic after the bind error, which was taken for another failure."""
    import socket

    from temporalio.client import Client

    from durable_agent.cli import dev

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = int(taken.getsockname()[1])

    def racing(preferred: int | None = None, avoid: Any = ()) -> int:
        return port if preferred == port else free_port(preferred, avoid)  # "free" when checked

    monkeypatch.setattr(dev, "free_port", racing)
    root = tmp_path / "temporal"
    (root / "logs").mkdir(parents=True)
    try:
        server = await dev.start_dev_server(root, port=port, ui_port=None)
    finally:
        taken.close()
    assert server.process is not None
    try:
        assert server.address != f"127.0.0.1:{port}"
        client = await Client.connect(server.address)
        assert await client.service_client.check_health()
    finally:
        server.process.stop()
