"""The session commands, `dev` and `worker` against a real server; `chat` in a real terminal.

One ``durable-agent dev`` (a dev server, its UI and a demo-app worker) serves the module; the
commands find it through the data directory's ``server.json``, as they would for a user, and
``chat`` runs in a real terminal (pexpect).
"""

from __future__ import annotations

import json
import re
import secrets
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests.cli.support import CLI, cli_env, plain, run_cli, wait_dead
from tests.support.polling import wait_until

pytestmark = pytest.mark.temporal

EXAMPLE_APP = Path(__file__).resolve().parents[2] / "examples" / "weather_app.py"


@dataclass
class Dev:
    env: dict[str, str]
    proc: subprocess.Popen[str]
    log: Path
    info: dict[str, Any]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    home = tmp_path_factory.mktemp("dev-home")
    # a slow tool long enough to press Ctrl-C while it runs
    env = cli_env(home, DURABLE_AGENT_DEMO_TOOL_SECONDS="20")
    log = home / "dev.out"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*CLI, "dev"], env=env, stdout=out, stderr=subprocess.STDOUT, text=True
        )
    try:
        wait_until(
            lambda: "is up" in log.read_text() or proc.poll() is not None,
            within=90,
            what="dev to start",
        )
        assert proc.poll() is None, log.read_text()
        info = json.loads((home / "durable-agent" / "server.json").read_text())
        yield Dev(env, proc, log, info)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0, log.read_text()
    assert wait_dead([info["pid"]]) == [], "dev stopped its server"
    assert not (home / "durable-agent" / "server.json").exists()


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_help_for_every_command(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    top = run_cli(["--help"], env)
    assert top.returncode == 0
    for name in ("demo", "dev", "worker", "run", "sessions", "show", "state", "chat"):
        assert name in top.stdout
        result = run_cli([name, "--help"], env)
        assert result.returncode == 0, result.stderr
        assert "Usage" in result.stdout


def test_usage_and_store_errors(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    worker = run_cli(["worker"], env)
    assert worker.returncode == 2 and "--app" in worker.stderr
    bad_store = run_cli(["show", "s1", "--store", "redis://x"], env)
    assert bad_store.returncode == 2 and "unknown store" in bad_store.stderr
    markup = run_cli(["show", "s1", "--store", "bogus:[/x]"], env)
    assert markup.returncode == 2 and "bogus:[/x]" in markup.stderr, markup.stderr
    assert "Traceback" not in markup.stderr
    bad_id = run_cli(["show", "bad id"], env)
    assert bad_id.returncode == 2 and "invalid session ID" in bad_id.stderr
    missing = run_cli(["show", "nobody"], env)
    assert missing.returncode == 3 and "no session 'nobody'" in missing.stderr
    bad_app = run_cli(["worker", "--app", "no_such_module_xyz:app"], env)
    assert bad_app.returncode == 1 and "cannot import" in bad_app.stderr
    empty = run_cli(["sessions"], env)
    assert empty.returncode == 0 and "no sessions" in empty.stdout


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1")
    result = run_cli(["run", "s1", "hi"], env)
    assert result.returncode == 1
    assert "cannot reach Temporal at 127.0.0.1:1" in result.stderr


def test_run_show_sessions_state(dev: Dev) -> None:
    env = dev.env
    turn = _json(run_cli(["run", "s1", "What's the weather in Paris?", "--json"], env))
    assert "18°C, light rain" in turn["reply"]
    roles = [e["message"]["role"] for e in turn["entries"]]
    assert roles == ["user", "assistant", "tool_result", "assistant"]
    assert turn["leaf_id"] == turn["entries"][-1]["id"]

    printed = run_cli(["run", "s1", "hello"], env)
    assert printed.returncode == 0, printed.stderr
    assert "✓ stored input" in printed.stdout and "assistant ▸ Hello!" in printed.stdout

    shown = _json(run_cli(["show", "s1", "--json"], env))
    assert len(shown["entries"]) == 6
    text = run_cli(["show", "s1"], env).stdout
    assert "Take an umbrella" in text and "session s1" in text
    tree = run_cli(["show", "s1", "--tree"], env).stdout
    assert "◀ leaf" in tree and shown["leaf_id"] in tree

    listed = _json(run_cli(["sessions", "--json"], env))
    assert [row["id"] for row in listed] == ["s1"]
    assert listed[0]["parent_id"] is None

    state = _json(run_cli(["state", "s1", "--json"], env))
    assert state["status"] == "completed"
    assert state["workflow_status"] == "COMPLETED"
    assert state["leaf_id"] == shown["leaf_id"]
    assert state["task_queue"] == dev.info["task_queue"]
    table = run_cli(["state", "s1"], env)
    assert table.returncode == 0 and "completed" in table.stdout
    none = run_cli(["state", "never-ran"], env)
    assert none.returncode == 3


def test_worker_from_an_example_app(dev: Dev, tmp_path: Path) -> None:
    ready = tmp_path / "worker.ready"
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [*CLI, "worker", "--app", f"{EXAMPLE_APP}:app", "--ready-file", str(ready)],
        env=dev.env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: ready.exists() or worker.poll() is not None, within=60, what="the worker"
        )
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        turn = _json(
            run_cli(
                [
                    "run",
                    "w1",
                    "Weather?",
                    "--agent",
                    "weather",
                    "--task-queue",
                    "weather",
                    "--json",
                ],
                dev.env,
            )
        )
        assert turn["reply"] == "Here you go: Lisbon: 21°C and sunny"
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        log.close()
    assert code == 0
    assert not ready.exists(), "the ready file goes away with the worker"


@pytest.mark.mongo
def test_mongo_store_from_the_cli(dev: Dev, mongo_uri: str, tmp_path: Path) -> None:
    """The same commands on a MongoStore: the worker by flag, the client by environment."""
    database = f"da_cli_{secrets.token_hex(4)}"
    env = {**dev.env, "DURABLE_AGENT_MONGODB_DB": database}
    ready = tmp_path / "mongo-worker.ready"
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [
            *CLI,
            "worker",
            "--app",
            "durable_agent.cli.demo_app:app",
            "--store",
            mongo_uri,
            "--task-queue",
            "mongo-q",
            "--ready-file",
            str(ready),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: ready.exists() or worker.poll() is not None, within=60, what="the worker"
        )
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        client_env = {**env, "DURABLE_AGENT_STORE": mongo_uri}
        turn = _json(
            run_cli(
                ["run", "m1", "What's the weather in Paris?", "--task-queue", "mongo-q", "--json"],
                client_env,
            )
        )
        assert "18°C" in turn["reply"]
        listed = _json(run_cli(["sessions", "--json"], client_env))
        assert [row["id"] for row in listed] == ["m1"]
        shown = _json(run_cli(["show", "m1", "--json", "--store", mongo_uri], env))
        assert [e["id"] for e in shown["entries"]] == [e["id"] for e in turn["entries"]]
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(30)
        log.close()
    assert code == 0


def test_chat_repl(dev: Dev) -> None:
    child = pexpect.spawn(
        CLI[0],
        [*CLI[1:], "chat", "c1"],
        env=dev.env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    prompt = "c1 ▸ "
    try:
        child.expect(prompt)
        child.sendline("What's the weather in Lisbon?")
        child.expect("24°C, sunny in Lisbon")
        child.expect(prompt)
        child.sendline("Crunch the Q3 numbers")
        child.expect("crunch_numbers.*running…")
        child.sendintr()  # Ctrl-C cancels the run, not the session
        child.expect("run cancelled")
        child.expect(prompt)
        child.sendline("/edit Crunch the Q4 numbers instead")
        child.expect("Q4 is not closed yet")
        child.expect(prompt)
        child.sendline("/tree")
        child.expect("◀ leaf")
        child.expect(prompt)
        child.sendline("/compact")
        child.expect("compaction [0-9a-f]{16}")
        child.expect(prompt)
        child.sendline("/fork c1-copy")
        child.expect("you are now in the fork")
        child.expect("c1-copy ▸ ")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
        transcript = plain(child.before or "")
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, transcript
    shown = _json(run_cli(["show", "c1", "--tree", "--json"], dev.env))
    users = [
        e["message"]["content"][0]["text"]
        for e in shown["entries"]
        if e["type"] == "message" and e["message"]["role"] == "user"
    ]
    assert "Crunch the Q3 numbers" in users, "the cancelled turn's input stays in the tree"
    assert "Crunch the Q4 numbers instead" in users
    assert any(e["type"] == "compaction" for e in shown["entries"])
    forked = _json(run_cli(["show", "c1-copy", "--json"], dev.env))
    assert forked["parent_id"] == "c1"
    assert re.fullmatch(r"[0-9a-f]{16}", forked["leaf_id"])


def test_dev_replaces_a_dead_worker(dev: Dev) -> None:
    """``dev`` behaves like a deployment: a worker that dies is started again."""
    import os

    first = int(re.search(r"worker\s+pid (\d+)", dev.log.read_text()).group(1))  # type: ignore[union-attr]
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: "restarting" in dev.log.read_text(), within=30, what="dev to notice")
    wait_until(
        lambda: re.search(r"worker \d+ up in", dev.log.read_text()), within=60, what="a new worker"
    )
    turn = _json(run_cli(["run", "after-restart", "hello", "--json"], dev.env))
    assert turn["reply"].startswith("Hello!")


def test_unreachable_mongo_is_one_line(tmp_path: Path) -> None:
    result = run_cli(["sessions", "--store", "mongodb://127.0.0.1:1/x"], cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    # one line: where, why, and (from the store) what it was doing
    assert re.fullmatch(
        r"error: cannot reach MongoDB at 127\.0\.0\.1:1 \(.+\)( \[[a-z ]+\])?", first
    )
