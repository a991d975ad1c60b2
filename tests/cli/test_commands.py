"""The session commands, `dev` and `worker` against a real server; `chat` in a real terminal.

One ``durable-agent dev`` (a dev server, its UI and a demo-app worker) serves the module; the
commands find it through the data directory's ``server.json``, as they would for a user, and
``chat`` runs in a real terminal (pexpect).
"""

from __future__ import annotations

import asyncio
import json
import re
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pexpect
import pytest
from temporalio.client import Client

from durable_agent.workflows import SEARCH_ATTRIBUTE
from tests.cli.support import CLI, Dev, plain, run_cli, running_dev, worker_process
from tests.support.polling import wait_until

pytestmark = pytest.mark.temporal


EXAMPLE_APP = Path(__file__).resolve().parents[2] / "examples" / "weather_app.py"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    # a slow tool long enough to press Ctrl-C while it runs
    with running_dev(
        tmp_path_factory.mktemp("dev-home"), DURABLE_AGENT_DEMO_TOOL_SECONDS="20"
    ) as running:
        yield running


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


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
        [
            *CLI,
            "worker",
            "--app",
            f"{EXAMPLE_APP}:app",
            "--ready-file",
            str(ready),
            "--max-cached-workflows",
            "50",
            "--live-every",
            "0.5",
        ],
        env={**dev.env, "DURABLE_AGENT_KNOWN_ENTRIES": "500"},
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
    # The tuning reached the worker: by flag and by environment (the ready line says what it got).
    said = " ".join((tmp_path / "worker.log").read_text().split())
    assert "cached workflows 50" in said and "known entries 500" in said, said
    assert "live text every 0.5 s" in said, said


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
        child.sendline("/compact two")
        child.expect(r"usage: /compact \[KEEP\]")
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

    started = re.search(r"worker\s+pid (\d+)", dev.log.read_text())
    assert started is not None, dev.log.read_text()
    first = int(started.group(1))
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: "restarting" in dev.log.read_text(), within=30, what="dev to notice")
    wait_until(
        lambda: re.search(r"worker \d+ up in", dev.log.read_text()), within=60, what="a new worker"
    )
    turn = _json(run_cli(["run", "after-restart", "hello", "--json"], dev.env))
    assert turn["reply"].startswith("Hello!")


def test_dev_stops_on_ctrl_c_without_a_traceback(tmp_path: Path) -> None:
    with running_dev(tmp_path, until="is up") as dev:  # Ctrl-C as soon as it says so
        pass
    assert "Traceback" not in dev.log.read_text(), dev.log.read_text()


def _with_password(uri: str) -> tuple[str, str]:
    """The URI with a password in it, and the password: the server's own, else a made-up one
    with PLAIN (FerretDB on SQLite accepts any credentials)."""
    from pymongo.uri_parser import parse_uri

    password = parse_uri(uri)["password"]
    if password:
        return uri, str(password)
    extra = ("&" if "?" in uri else "?") + "authMechanism=PLAIN"
    return uri.replace("://", "://da:Pw9Secret@", 1) + extra, "Pw9Secret"


@pytest.mark.mongo
def test_dev_prints_and_passes_no_store_password(mongo_uri: str, tmp_path: Path) -> None:
    """Neither the banner nor the worker's argv (readable by any user) holds the password."""
    uri, password = _with_password(mongo_uri)
    database = f"da_cli_{secrets.token_hex(4)}"
    with running_dev(tmp_path, "--store", uri, DURABLE_AGENT_MONGODB_DB=database) as dev:
        banner = dev.log.read_text()
        started = re.search(r"worker\s+pid (\d+)", banner)
        assert started is not None, banner
        argv = Path(f"/proc/{started.group(1)}/cmdline").read_bytes()
    assert re.search(r"store +mongodb(\+srv)?://[^ ]*:\*\*\*@", banner), banner
    assert password not in banner
    assert password.encode() not in argv


def _sessions_dir(dev: Dev) -> Path:
    return Path(dev.env["XDG_DATA_HOME"]) / "durable-agent" / "sessions"


def test_verbose_and_errors_say_what_is_used(dev: Dev) -> None:
    """15.3: ``-v`` names the Temporal server (and why that one) and the store up front; an
    error always does."""
    store = f"file:{_sessions_dir(dev)}"
    temporal = (
        f"{dev.info['address']} (namespace default; address from the running `durable-agent dev`"
    )
    ran = run_cli(["run", "v1", "hello", "-v"], dev.env)
    assert ran.returncode == 0, ran.stderr
    assert f"using store {store}\n" in ran.stderr
    assert f"using Temporal {temporal}" in ran.stderr
    quiet = run_cli(["run", "v1", "hello"], dev.env)
    assert quiet.returncode == 0 and "using" not in quiet.stderr
    shown = run_cli(["show", "v1", "-v"], dev.env)
    assert shown.returncode == 0 and f"using store {store}" in shown.stderr
    listed = run_cli(["sessions", "-v"], dev.env)
    assert listed.returncode == 0 and f"using store {store}" in listed.stderr
    missing = run_cli(["state", "never-ran"], dev.env)
    assert missing.returncode == 3
    assert f"  (Temporal {temporal}" in missing.stderr
    not_there = run_cli(["show", "never-was"], dev.env)
    assert not_there.returncode == 3 and f"in {store}" in not_there.stderr
    assert not_there.stderr.count(store) == 1, "the error names the store, once"


def test_a_worker_on_another_store_is_one_line(dev: Dev, tmp_path: Path) -> None:
    """15.3: the worker advertises its store's ID; a client on another store says so in one
    line and creates nothing (before: a warning, an empty session, then SessionNotFoundError)."""
    queue = dev.info["task_queue"]
    other = tmp_path / "other"
    result = run_cli(["run", "mm1", "hello", "--store", f"file:{other}"], dev.env)
    assert result.returncode == 1, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"error: the worker(s) on task queue {queue!r} use another store than this command "
        f"(file:{other}): give both the same --store"
    )
    assert "SessionNotFoundError" not in result.stderr
    assert not (other / "mm1.jsonl").exists(), "nothing created in the wrong store"
    assert not (_sessions_dir(dev) / "mm1.jsonl").exists()
    chat = run_cli(["chat", "mm3", "--store", f"file:{other}"], dev.env)
    assert chat.returncode == 1 and "use another store" in chat.stderr, chat.stderr
    assert not (other / "mm3.jsonl").exists()
    # the same store under another name is the same store: IDs are compared, not specs
    alias = tmp_path / "alias"
    alias.symlink_to(_sessions_dir(dev))
    same = run_cli(["run", "mm2", "hello", "--store", f"file:{alias}", "--json"], dev.env)
    assert same.returncode == 0, same.stderr


def test_a_run_while_another_goes_on_the_session_is_refused(dev: Dev, tmp_path: Path) -> None:
    """A second ``run`` from the tail of a session whose run is mid-tool would take the call
    for an interrupted one: refused, storing nothing, and the first run goes on.

    The first run's tool works until the test ends it: the commands below (five interpreter
    starts, seconds each on a loaded machine) outlasted the module's 20 s tool, and the chat's
    ``hello`` then started a run of its own."""
    env = {**dev.env, "DURABLE_AGENT_TASK_QUEUE": f"busy-{secrets.token_hex(4)}"}
    slow = {**env, "DURABLE_AGENT_DEMO_TOOL_SECONDS": "3600"}
    app = ["--app", "durable_agent.cli.demo_app:app"]
    with worker_process(slow, tmp_path, *app):
        _refused_while_a_run_goes(env, dev.info["address"])


def _refused_while_a_run_goes(env: dict[str, str], address: str) -> None:
    first = subprocess.Popen(
        [*CLI, "run", "busy1", "Crunch the Q3 sales numbers, please.", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        query = f'{SEARCH_ATTRIBUTE} = "busy1" AND ExecutionStatus = "Running"'

        async def listed() -> bool:  # as far as visibility (a second behind) can tell
            client = await Client.connect(address)
            return [w async for w in client.list_workflows(query)] != []

        wait_until(lambda: asyncio.run(listed()), within=60, what="the run listed")
        second = run_cli(["run", "busy1", "hello"], env)
        assert second.returncode == 1, second.stderr
        assert "has a run going" in second.stderr and "Traceback" not in second.stderr

        def mid_tool() -> str | None:  # the tail: the reply that called the slow tool
            shown = json.loads(run_cli(["show", "busy1", "--json"], env).stdout or "{}")
            return shown.get("leaf_id") if "tool_call" in json.dumps(shown) else None

        tail = wait_until(mid_tool, within=60, what="the run's tool call stored")
        # naming the tail with --leaf is the same run from the tail: refused the same way
        at_tail = run_cli(["run", "busy1", "hello", "--leaf", tail], env)
        assert at_tail.returncode == 1, at_tail.stderr
        assert "has a run going" in at_tail.stderr and "Traceback" not in at_tail.stderr
        chat = pexpect.spawn(
            CLI[0], [*CLI[1:], "chat", "busy1"], env=env, encoding="utf-8", timeout=60
        )
        try:
            chat.expect("busy1 ▸ ")
            chat.sendline("hello")
            chat.expect("has a run going")
            chat.expect("busy1 ▸ ")  # and the chat reads on
            chat.sendline("/compact 0")  # would summarize the going run's call as interrupted
            chat.expect("has a run going")
            chat.expect("busy1 ▸ ")
        finally:
            chat.terminate(force=True)
        shown = _json(run_cli(["show", "busy1", "--json"], env))
        assert "hello" not in json.dumps(shown) and "interrupted" not in json.dumps(shown)
        assert "compaction" not in json.dumps(shown)
    finally:
        first.send_signal(signal.SIGINT)
        _, said = first.communicate(timeout=60)
    # Ctrl-C says where the run left the session (its cancelled call answered)
    leaf = _json(run_cli(["show", "busy1", "--json"], env))["leaf_id"]
    assert f"run cancelled; session busy1 is at leaf {leaf}" in said, said


def test_run_problems_leave_no_session(dev: Dev) -> None:
    """15.17: a run that cannot start creates no session (and leaves an existing one alone)."""
    sessions = _sessions_dir(dev)
    problems: list[tuple[list[str | bytes], int, str]] = [
        (["run", "p1", ""], 2, "the message is empty"),
        (["run", "p1", "  \n "], 2, "the message is empty"),
        (["run", "p1", b"caf\xe9"], 2, "not valid UTF-8"),
        (["run", "p1", "hi", "--leaf", "nosuch"], 3, "no session 'p1'"),
        (["run", "p1", "hi", "--agent", "nosuch"], 1, "unknown agent 'nosuch'"),
    ]
    for args, code, message in problems:
        result = subprocess.run(
            [*CLI, *args], env=dev.env, capture_output=True, timeout=120, check=False
        )
        stderr = result.stderr.decode("utf-8", "replace")
        assert result.returncode == code, (args, stderr)
        assert message in stderr and "Traceback" not in stderr, (args, stderr)
        assert not (sessions / "p1.jsonl").exists(), f"{args} left an empty session"
    big = subprocess.run(
        [*CLI, "run", "p1", "-"],
        env=dev.env,
        input="x" * (3 * 1024 * 1024),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert big.returncode == 1 and "payload limit" in big.stderr, big.stderr
    assert not (sessions / "p1.jsonl").exists()

    kept = _json(run_cli(["run", "p2", "hello", "--json"], dev.env))
    failed = run_cli(["run", "p2", "hello", "--agent", "nosuch"], dev.env)
    assert failed.returncode == 1
    after = _json(run_cli(["show", "p2", "--json"], dev.env))
    assert after["leaf_id"] == kept["leaf_id"], "an existing session is never removed"


def test_address_namespace_and_profile_flags(dev: Dev, tmp_path: Path) -> None:
    """15.15: flags beat the temporal CLI's variables; profiles come from its config file."""
    address, queue = dev.info["address"], dev.info["task_queue"]
    env = {**dev.env, "TEMPORAL_ADDRESS": "127.0.0.1:1"}
    wrong = run_cli(["state", "f1"], env)
    assert wrong.returncode == 1 and "cannot reach Temporal at 127.0.0.1:1" in wrong.stderr
    assert "address from TEMPORAL_ADDRESS" in wrong.stderr
    flagged = run_cli(
        ["run", "f1", "hello", "--address", address, "--task-queue", queue, "--json"], env
    )
    assert flagged.returncode == 0, flagged.stderr
    verbose = run_cli(["state", "f1", "--address", address, "-v", "--json"], env)
    assert verbose.returncode == 0, verbose.stderr
    assert f"using Temporal {address} (namespace default; address from --address)" in (
        verbose.stderr
    )
    namespace = run_cli(["state", "f1", "--address", address, "--namespace", "no-such-ns"], env)
    assert namespace.returncode == 1 and "no-such-ns" in namespace.stderr, namespace.stderr
    assert "Traceback" not in namespace.stderr

    config = tmp_path / "temporal.toml"
    config.write_text(f'[profile.staging]\naddress = "{address}"\nnamespace = "default"\n')
    profiled = {**dev.env, "TEMPORAL_CONFIG_FILE": str(config)}
    by_flag = run_cli(["state", "f1", "--profile", "staging", "-v", "--json"], profiled)
    assert by_flag.returncode == 0, by_flag.stderr
    assert "address from profile 'staging'" in by_flag.stderr
    by_env = run_cli(["state", "f1", "--json"], {**profiled, "TEMPORAL_PROFILE": "staging"})
    assert by_env.returncode == 0, by_env.stderr
    unknown = run_cli(["state", "f1", "--profile", "nope"], profiled)
    assert unknown.returncode == 2 and "Profile 'nope' not found" in unknown.stderr


def test_run_from_an_earlier_leaf(dev: Dev) -> None:
    """15.19: ``run --leaf ENTRY`` continues an earlier branch; ``--leaf root`` starts anew."""
    first = _json(run_cli(["run", "b1", "What's the weather in Paris?", "--json"], dev.env))
    second = _json(run_cli(["run", "b1", "hello", "--json"], dev.env))
    assert second["entries"][0]["parent_id"] == first["leaf_id"]
    branched = _json(
        run_cli(["run", "b1", "Weather in Lisbon?", "--leaf", first["leaf_id"], "--json"], dev.env)
    )
    assert branched["entries"][0]["parent_id"] == first["leaf_id"]
    assert "Lisbon" in branched["reply"]
    rooted = _json(run_cli(["run", "b1", "hello", "--leaf", "root", "--json"], dev.env))
    assert "parent_id" not in rooted["entries"][0] or rooted["entries"][0]["parent_id"] is None
    shown = _json(run_cli(["show", "b1", "--json"], dev.env))
    assert shown["leaf_id"] == rooted["leaf_id"]
    bogus = run_cli(["run", "b1", "hi", "--leaf", "nosuch"], dev.env)
    assert bogus.returncode == 3 and "no entry 'nosuch' in session 'b1'" in bogus.stderr


def test_a_piped_chat_runs_its_commands_after_the_run(dev: Dev) -> None:
    """A script pipes lines into ``chat``: they all arrive while the first run works, and a
    ``/command`` among them waits for the run's end and runs (``/tree`` draws, ``/quit`` quits);
    it was dropped with a hint, so a script's ``/tree`` never ran."""
    script = "What's the weather in Lisbon?\n/tree\n/quit\nnever sent\n"
    done = subprocess.run(
        [*CLI, "chat", "p1"], env=dev.env, input=script, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = plain(done.stdout)
    assert "24°C, sunny in Lisbon" in out and "◀ leaf" in out, out
    assert out.index("24°C, sunny in Lisbon") < out.index("◀ leaf"), out
    assert "never sent" not in out, "the lines after /quit are not read as a message"
    told = _json(run_cli(["show", "p1", "--json"], dev.env))
    assert told["entries"], "the question was asked"
    assert all("never sent" not in json.dumps(e) for e in told["entries"]), told


def test_a_chat_left_without_a_word_leaves_no_session(dev: Dev) -> None:
    """15.17: opening a chat on a new session and leaving it creates nothing."""
    child = pexpect.spawn(
        CLI[0], [*CLI[1:], "chat", "e1"], env=dev.env, encoding="utf-8", timeout=60
    )
    try:
        child.expect("e1 ▸ ")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    assert not (_sessions_dir(dev) / "e1.jsonl").exists()


SGR = r"(?:\x1b\[[0-9;]*m)*"


def test_chat_switches_branches_and_sessions(dev: Dev) -> None:
    """15.19: ``/switch`` lists the branches and returns to one, or to a fork's parent."""
    child = pexpect.spawn(
        CLI[0],
        [*CLI[1:], "chat", "sw1"],
        env=dev.env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    try:
        child.expect("sw1 ▸ ")
        child.sendline("What's the weather in Paris?")
        child.expect("Take an umbrella")
        child.expect("sw1 ▸ ")
        child.sendline("/retry")
        child.expect("branched before")
        child.expect("sw1 ▸ ")
        child.sendline("/switch")
        child.expect(rf"1\. {SGR}([0-9a-f]{{16}}){SGR} {SGR}assistant")
        first_tip = child.match.group(1)
        child.expect(rf"2\. {SGR}([0-9a-f]{{16}}){SGR} {SGR}assistant.*◀ active")
        child.expect("sw1 ▸ ")
        child.sendline("/switch 1")
        child.expect(f"leaf is now {first_tip}")
        child.expect("sw1 ▸ ")
        child.sendline("hello")
        child.expect("Hello!")
        child.expect("sw1 ▸ ")
        child.sendline("/fork sw1-fork")
        child.expect("sw1-fork ▸ ")
        child.sendline("/switch")
        child.expect(r"parent session: sw1 \(/switch parent\)")
        child.expect("sw1-fork ▸ ")
        child.sendline("/switch parent")
        child.expect(f"now in session {SGR}sw1{SGR} at leaf")
        child.expect("sw1 ▸ ")
        child.sendline(f"/leaf {first_tip}")
        child.expect(f"leaf is now {first_tip}")
        child.expect("sw1 ▸ ")
        child.sendline("/switch no-such-session")
        child.expect("no session no-such-session")
        child.expect("sw1 ▸ ")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0
    shown = _json(run_cli(["show", "sw1", "--tree", "--json"], dev.env))
    hello = next(
        e
        for e in shown["entries"]
        if e["type"] == "message"
        and e["message"]["role"] == "user"
        and e["message"]["content"][0]["text"] == "hello"
    )
    assert hello["parent_id"] == first_tip, "the turn after /switch 1 continued branch 1"


def test_a_chat_goes_on_after_another_process_ran_on_its_session(dev: Dev) -> None:
    """Two shells on one session: a ``run`` (or another chat) stores a turn while a chat sits
    at its prompt. The chat's next question goes on from that turn; it was refused for good
    ("another run or decision stored on session ... start it again once the session is idle",
    on every line, the session idle), as its handle never took in the other process's entries."""
    child = pexpect.spawn(
        CLI[0], [*CLI[1:], "chat", "two1"], env=dev.env, encoding="utf-8", timeout=60
    )
    try:
        child.expect("two1 ▸ ")
        elsewhere = run_cli(["run", "two1", "hello"], dev.env)
        assert elsewhere.returncode == 0, elsewhere.stderr
        child.sendline("What's the weather in Lisbon?")
        answered = child.expect(["24°C, sunny in Lisbon", "error: .*\r\n"])
        assert answered == 0, plain(child.after)
        child.expect("two1 ▸ ")
        child.sendline("/quit")
        child.expect(pexpect.EOF)
        said = plain(child.before or "")
    finally:
        child.close(force=True)
    assert child.exitstatus == 0 and "error" not in said, said
    shown = _json(run_cli(["show", "two1", "--json"], dev.env))
    users = [
        e["message"]["content"][0]["text"]
        for e in shown["entries"]
        if e.get("message", {}).get("role") == "user"
    ]
    assert users == ["hello", "What's the weather in Lisbon?"], (
        "one path: the chat went on from the run's turn"
    )


@contextmanager
def _chat_after_another_turn(dev: Dev, session: str) -> Iterator[pexpect.spawn]:
    """A chat on ``session`` (one turn stored), then another shell's turn on it, stored while
    the chat waits at its prompt; the block drives the chat, which is left with ``/quit``."""
    assert run_cli(["run", session, "hello"], dev.env).returncode == 0
    child = pexpect.spawn(
        CLI[0], [*CLI[1:], "chat", session], env=dev.env, encoding="utf-8", timeout=60
    )
    try:
        child.expect(f"{session} ▸ ")
        elsewhere = run_cli(["run", session, "What's the weather in Lisbon?"], dev.env)
        assert elsewhere.returncode == 0, elsewhere.stderr
        yield child
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def _users(session: str, env: dict[str, str]) -> list[tuple[str, str | None, str]]:
    """The user messages of ``session``'s whole tree: (ID, parent ID, text)."""
    shown = _json(run_cli(["show", session, "--tree", "--json"], env))
    return [
        (e["id"], e.get("parent_id"), e["message"]["content"][0]["text"])
        for e in shown["entries"]
        if e.get("message", {}).get("role") == "user"
    ]


def test_a_chat_compacts_what_another_process_stored_meanwhile(dev: Dev) -> None:
    """``/compact`` after another shell's turn summarizes up to that turn, on one path; it
    compacted the chat's stale leaf instead: a branch beside the other turn, made the active one,
    so the session's newest turn fell off the path its next question goes on from."""
    with _chat_after_another_turn(dev, "two2") as child:
        child.sendline("/compact 0")
        child.expect("compaction [0-9a-f]{16}")
        child.expect("two2 ▸ ")
    shown = _json(run_cli(["show", "two2", "--json"], dev.env))
    kinds = [e["type"] for e in shown["entries"]]
    assert kinds[-1] == "compaction", kinds
    assert len(kinds) == 7, "the compaction follows the other turn's reply: " + json.dumps(shown)


@pytest.mark.parametrize("command", ["/retry", "/edit What's the weather in Paris?"])
def test_retry_and_edit_act_on_what_another_process_stored_meanwhile(
    dev: Dev, command: str
) -> None:
    """``/retry`` and ``/edit`` after another shell's turn act on that turn's question, the
    session's last one; they acted on the chat's own stale last question ("hello"), branching
    before it, so the other shell's turn fell off the active path."""
    session = "two3" if command == "/retry" else "two4"
    with _chat_after_another_turn(dev, session) as child:
        child.sendline(command)
        child.expect("branched before ([0-9a-f]{16})")
        before = child.match.group(1)
        child.expect(f"{session} ▸ ")
    users = _users(session, dev.env)
    lisbon = users[1]
    assert lisbon[2] == "What's the weather in Lisbon?", users
    assert before == lisbon[0], f"branched before the other shell's question: {users}"
    again = "Lisbon" if command == "/retry" else "Paris"
    assert users[-1][1:] == (lisbon[1], f"What's the weather in {again}?"), users


def test_show_tree_and_fork_see_what_another_process_stored_meanwhile(dev: Dev) -> None:
    """``/show``, ``/tree`` and ``/fork`` (``/branch`` and ``/switch`` too) after another
    shell's turn include that turn: they showed (and forked) the chat's own stale path, as if
    the other turn had not happened."""
    with _chat_after_another_turn(dev, "two5") as child:
        for command in ("/show", "/tree"):
            child.sendline(command)
            child.expect("Lisbon")
            child.expect("two5 ▸ ")
        child.sendline("/fork two5-fork")
        child.expect("you are now in the fork")
        child.expect("two5-fork ▸ ")
    texts = [text for _, _, text in _users("two5-fork", dev.env)]
    assert texts == ["hello", "What's the weather in Lisbon?"], texts
