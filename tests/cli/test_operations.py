"""What an operator and an app developer meet around a running system: how the library finds
Temporal, what ``state`` says about closed runs, the worker's log lines, and its health check.

One ``durable-agent dev --log-format json`` serves the module (found through ``server.json``, as a
user's commands and scripts find it); the log and health tests start their own
``durable-agent worker`` processes on private task queues, and kill them for real.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.cli.support import CLI, Dev, run_cli, running_dev, worker_process
from tests.support.polling import eventually, poll, wait_until

pytestmark = pytest.mark.temporal

OPS_APP = Path(__file__).resolve().parents[1] / "support" / "ops_app.py"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    # a slow tool long enough to cancel or terminate a run while it works
    home = tmp_path_factory.mktemp("ops-home")
    with running_dev(home, "--log-format", "json", DURABLE_AGENT_DEMO_TOOL_SECONDS="60") as dev:
        yield dev


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def _python(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- the library finds Temporal as the CLI does --------------------------------------------------

CONNECT = """
import asyncio
from durable_agent.workflows import connect_from_env

async def main() -> None:
    client = await connect_from_env()
    print(client.service_client.config.target_host)

asyncio.run(main())
"""


def test_connect_from_env_finds_a_running_dev(dev: Dev) -> None:
    """No TEMPORAL_ADDRESS, no profile: the script connects to the running ``durable-agent dev``
    (before: localhost:7233, whatever answers there, or a raw transport error)."""
    script = _python(CONNECT, dev.env)
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    assert out.strip() == dev.info["address"]


def test_an_unreachable_temporal_is_one_typed_error(tmp_path: Path) -> None:
    """Each way of naming the address: the error is a TemporalConnectError saying where it tried,
    why there, and what to do; a script that does not catch it exits 1 with it (never 134, the
    SDK's native thread aborting the interpreter's shutdown)."""
    from durable_agent.workflows.config import ServerInfo, write_server_info

    config = tmp_path / "temporal.toml"
    config.write_text('[profile.default]\naddress = "127.0.0.1:2"\n')
    advertised = tmp_path / "advertised"
    # a dev server that is advertised (its process alive: this one) but does not answer
    write_server_info(
        advertised / "durable-agent",
        ServerInfo(os.getpid(), os.getpid(), "127.0.0.1:3", "", "durable-agent"),
    )
    cases = {
        "TEMPORAL_ADDRESS": ({"TEMPORAL_ADDRESS": "127.0.0.1:1"}, "127.0.0.1:1"),
        "profile 'default'": ({"TEMPORAL_CONFIG_FILE": str(config)}, "127.0.0.1:2"),
        f"the running `durable-agent dev` (pid {os.getpid()})": (
            {"XDG_DATA_HOME": str(advertised), "TEMPORAL_CONFIG_FILE": str(tmp_path / "none")},
            "127.0.0.1:3",
        ),
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "XDG_"))}
    base["XDG_DATA_HOME"] = str(tmp_path / "nothing-advertised")
    runs = [
        (source, address, _python(CONNECT, {**base, **env}))
        for source, (env, address) in cases.items()
        for _ in range(4)
    ]
    for source, address, script in runs:
        _, err = script.communicate(timeout=60)
        last = err.strip().splitlines()[-1]
        assert script.returncode == 1, (script.returncode, err)
        assert last.startswith(
            "durable_agent.workflows.config.TemporalConnectError: cannot reach Temporal at "
            f"{address} (namespace default; address from {source}): "
        ), last
        assert "durable-agent dev" in last and "TEMPORAL_ADDRESS" in last, last


# -- state: a closed run's status wins -----------------------------------------------------------


async def _client(dev: Dev) -> Client:
    return await Client.connect(dev.info["address"], data_converter=pydantic_data_converter)


async def _start(
    dev: Dev, client: Client, session_id: str, op: str, **fields: str
) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        "durable_agent.run",
        {"session_id": session_id, **fields},
        id=f"durable-agent/{session_id}/run/{op}",
        task_queue=dev.info["task_queue"],
    )


async def _tool_running(handle: WorkflowHandle[Any, Any]) -> None:
    async def started() -> bool:
        pending = (await handle.describe()).raw_description.pending_activities
        return any(
            p.activity_type.name == "durable_agent.call_tool"
            and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
            for p in pending
        )

    await eventually(started, within=60, what="the slow tool to run")


def _state_of(dev: Dev, session_id: str, workflow_id: str) -> dict[str, Any]:
    """``state --json`` once the listing shows ``workflow_id`` as the latest run."""

    def probe() -> dict[str, Any] | None:
        state: dict[str, Any] = _json(run_cli(["state", session_id, "--json"], dev.env))
        return state if state["workflow_id"] == workflow_id else None

    return wait_until(probe, within=30, what=f"{workflow_id} listed")


@pytest.mark.parametrize("ending", ["cancel", "terminate"])
async def test_state_of_a_run_cancelled_or_terminated_mid_tool(dev: Dev, ending: str) -> None:
    """Before: ``running_tools`` (the query replays the history up to the tool call)."""
    session_id = f"st-{ending}-{secrets.token_hex(3)}"
    client = await _client(dev)
    handle = await _start(dev, client, session_id, "op-1", agent="demo", text="What were Q2 sales?")
    await _tool_running(handle)
    if ending == "cancel":
        await handle.cancel()
    else:
        await handle.terminate(reason="operator stopped it")
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    state = _state_of(dev, session_id, handle.id)
    expected = {"cancel": ("cancelled", "CANCELED"), "terminate": ("terminated", "TERMINATED")}
    assert (state["status"], state["workflow_status"]) == expected[ending], state
    table = run_cli(["state", session_id], dev.env)
    assert table.returncode == 0 and expected[ending][0] in table.stdout, table.stdout
    assert "running_tools" not in table.stdout


async def test_state_of_a_failed_run_says_why_and_names_the_run_before(dev: Dev) -> None:
    """A run started (from the UI, say) with an unknown agent fails at once. Before: ``starting``,
    and nothing about the session's last real run."""
    session_id = f"st-failed-{secrets.token_hex(3)}"
    real = _json(run_cli(["run", session_id, "hello", "--json"], dev.env))
    client = await _client(dev)
    handle = await _start(dev, client, session_id, "bad", agent="nosuch", text="hi")
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    state = _state_of(dev, session_id, handle.id)
    assert (state["status"], state["workflow_status"]) == ("failed", "FAILED"), state
    assert "UnknownAgentError" in state["failure"] and "nosuch" in state["failure"]
    previous = state["previous_run"]
    assert previous["workflow_status"] == "COMPLETED"
    assert previous["workflow_id"] == f"durable-agent/{session_id}/run/{real['run_id']}"
    shown = run_cli(["state", session_id], dev.env)
    assert shown.returncode == 0, shown.stderr
    table = " ".join(shown.stdout.split())
    assert "failed" in table and "UnknownAgentError" in table and previous["workflow_id"] in table


async def test_state_of_a_run_whose_input_was_refused_names_its_failure(dev: Dev) -> None:
    """A run started by hand with input the worker refuses (a typo). Before: not listed under
    its session at all (``no runs of session``); once listed, the ``state`` query's refusal
    (the run has no state) read as an unanswered query, "queries need a worker polling"."""
    session_id = f"st-refused-{secrets.token_hex(3)}"
    client = await _client(dev)
    handle = await _start(dev, client, session_id, "typo", agent="demo", txt="hi")
    with pytest.raises(WorkflowFailureError):
        await handle.result()

    def listed() -> subprocess.CompletedProcess[str] | None:
        shown = run_cli(["state", session_id, "--json"], dev.env)
        return None if "no runs of session" in shown.stdout + shown.stderr else shown

    shown = wait_until(listed, within=30, what=f"{handle.id} listed")
    state = _json(shown)
    assert state["workflow_id"] == handle.id
    assert (state["status"], state["workflow_status"]) == ("failed", "FAILED"), state
    assert "InvalidRunInput" in state["failure"] and "txt: unknown field" in state["failure"]
    table = run_cli(["state", session_id], dev.env)
    assert table.returncode == 0, table.stdout + table.stderr
    assert "InvalidRunInput" in " ".join(table.stdout.split())


# -- the worker's log ----------------------------------------------------------------------------

STAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z (DEBUG|INFO|WARNING|ERROR|CRITICAL) \S+: "
"""How every text log line starts: the time (UTC), the level and the logger."""


async def _drive(dev: Dev, queue: str, store: str) -> None:
    """The errors a worker meets: a model attempt that fails and is retried, an unknown agent,
    an unknown leaf (expected: one line each), and a model adapter's bug (unexpected)."""
    flags = ["--task-queue", queue, "--store", store, "--json"]
    retried = _json(run_cli(["run", "lg1", "hi", "--agent", "flaky", *flags], dev.env))
    assert retried["reply"] == "Hello after a retry"
    broken = run_cli(["run", "lg2", "hi", "--agent", "broken", *flags], dev.env)
    assert broken.returncode == 1, broken.stderr
    client = await _client(dev)
    for op, fields in {
        "nosuch-agent": {"agent": "nosuch", "text": "hi"},
        "nosuch-leaf": {"agent": "hello", "text": "hi", "leaf_id": "0123456789abcdef"},
    }.items():
        handle = await client.start_workflow(
            "durable_agent.run",
            {"session_id": "lg1", **fields},
            id=f"durable-agent/lg1/run/{op}-{secrets.token_hex(3)}",
            task_queue=queue,
        )
        with pytest.raises(WorkflowFailureError):
            await handle.result()


def _records(text: str) -> list[str]:
    """The log's records: a line with a time stamp starts one, any other line continues it."""
    records: list[str] = []
    for line in text.splitlines():
        if re.match(STAMP, line) or not records:
            records.append(line)
        else:
            records[-1] += "\n" + line
    return records


async def test_worker_log_lines_have_time_and_level_and_expected_errors_are_one_line(
    dev: Dev, tmp_path: Path
) -> None:
    queue, store = f"ops-logs-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    args = ["--app", f"{OPS_APP}:app", "--store", store, "--task-queue", queue]
    with worker_process(dev.env, tmp_path, *args) as worker:
        await _drive(dev, queue, store)
    assert worker.proc.returncode == 0, worker.text()
    records = _records(worker.text())
    for record in records:
        assert re.match(STAMP, record), f"no time stamp and level: {record!r}"
    assert any("ready" in r and " INFO " in r for r in records)
    for expected in ("UnknownAgentError", "EntryNotFoundError", "overloaded (503)"):
        found = [r for r in records if expected in r]
        assert found, f"nothing logged about {expected}"
        for record in found:
            assert "\n" not in record, (
                f"{expected} takes {record.count(chr(10)) + 1} lines:\n{record}"
            )
    unexpected = [r for r in records if "adapter dropped its connection pool" in r]
    assert any("Traceback" in r and "RuntimeError" in r for r in unexpected), unexpected
    multi_line = [r for r in records if "\n" in r]
    assert all("RuntimeError" in r for r in multi_line), multi_line


async def test_worker_log_format_json(dev: Dev, tmp_path: Path) -> None:
    """``--log-format json``: one object per line (time, level, logger, message; the error's type
    for errors, and the traceback for unexpected ones); ``dev --log-format json`` passes it on."""
    queue, store = f"ops-json-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    args = ["--app", f"{OPS_APP}:app", "--store", store, "--task-queue", queue]
    with worker_process(dev.env, tmp_path, *args, "--log-format", "json") as worker:
        await _drive(dev, queue, store)
    lines = worker.text().splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z", record["time"])
    types = {r.get("error_type") for r in records}
    assert {"UnknownAgentError", "EntryNotFoundError", "ModelError", "RuntimeError"} <= types
    for record in records:
        if record.get("error_type") in ("UnknownAgentError", "EntryNotFoundError"):
            assert "traceback" not in record and record["level"] == "WARNING", record
    bug = next(r for r in records if r.get("error_type") == "RuntimeError")
    assert "Traceback" in bug["traceback"], bug
    dev_worker = Path(dev.env["XDG_DATA_HOME"]) / "durable-agent" / "logs" / "dev-worker.log"
    dev_records = [json.loads(line) for line in dev_worker.read_text().splitlines()]
    assert any("ready" in r["message"] for r in dev_records)


# -- health: this worker, from the process itself ------------------------------------------------


def _check(dev: Dev, ready: Path, queue: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        ["worker", "--check", "--ready-file", str(ready), "--task-queue", queue], dev.env
    )


def _unhealthy(dev: Dev, ready: Path, queue: str) -> subprocess.CompletedProcess[str] | None:
    """The check's result if it says unhealthy (exit status 1), else None (poll on)."""
    check = _check(dev, ready, queue)
    return check if check.returncode == 1 else None


def test_check_fails_within_seconds_of_a_sigkill_and_counts_only_this_worker(
    dev: Dev, tmp_path: Path
) -> None:
    """Two workers on one queue; the one SIGKILLed is unhealthy at once (before: ``healthy`` for
    minutes: Temporal lists a dead poller, and the other worker's poller counted too), the other
    stays healthy; a frozen worker (SIGSTOP) is unhealthy once its heartbeat is stale."""
    queue, store = f"ops-health-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    args = ["--app", f"{OPS_APP}:app", "--store", store, "--task-queue", queue]
    with (
        worker_process(dev.env, tmp_path, *args, name="a") as a,
        worker_process(dev.env, tmp_path, *args, name="b") as b,
    ):
        healthy = [_check(dev, worker.ready, queue) for worker in (a, b)]
        for check in healthy:
            assert check.returncode == 0, check.stdout + check.stderr
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(10)
        assert a.ready.exists(), "a SIGKILL leaves the file behind"
        # at once: the first check after the kill says so (a check's own start, imports on a
        # loaded machine, can take longer than seconds: a deadline would time the interpreter)
        dead = _check(dev, a.ready, queue)
        assert dead.returncode == 1, "still healthy after the SIGKILL:\n" + dead.stdout
        assert f"pid {a.proc.pid}" in dead.stdout and "unhealthy" in dead.stdout, dead.stdout
        assert _check(dev, b.ready, queue).returncode == 0, "the other worker is still fine"
        for worker, check in zip((a, b), healthy, strict=True):
            assert f"healthy: worker pid {worker.proc.pid} " in check.stdout, check.stdout

        b.proc.send_signal(signal.SIGSTOP)
        try:
            frozen = poll(lambda: _unhealthy(dev, b.ready, queue), within=20)
            assert frozen, "a frozen worker still healthy after 20 s"
            assert "heartbeat" in frozen.stdout, frozen.stdout
        finally:
            b.proc.send_signal(signal.SIGCONT)
        assert poll(lambda: _check(dev, b.ready, queue).returncode == 0, within=20)
    missing = _check(dev, tmp_path / "never.ready", queue)
    assert missing.returncode == 1 and "unhealthy" in missing.stdout


# -- stopping: what a worker told to stop does with the calls it is working on --------------------


async def test_sigterm_lets_a_tool_in_flight_finish(dev: Dev, tmp_path: Path) -> None:
    """A deploy's SIGTERM mid-tool: the worker stops polling (its ready file goes at once) and
    lets the call finish within its grace before it exits 0. Before, the call was cancelled at
    once: a tool tried only once (it must not run twice) failed with ``WorkerShutdown``."""
    queue, store = f"ops-stop-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    args = ["--app", f"{OPS_APP}:app", "--store", store, "--task-queue", queue]
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path)}
    client = await _client(dev)
    with worker_process(env, tmp_path, *args) as worker:
        handle = await client.start_workflow(
            "durable_agent.run",
            {"session_id": "stop1", "agent": "settle", "text": "pay"},
            id=f"durable-agent/stop1/run/{secrets.token_hex(4)}",
            task_queue=queue,
        )
        wait_until(lambda: (tmp_path / "started").exists(), within=60, what="the tool to start")
        worker.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not worker.ready.exists(), within=10, what="the ready file to go")
        assert worker.proc.poll() is None, "exited with the tool in flight:\n" + worker.text()
        (tmp_path / "release").touch()
        assert worker.proc.wait(30) == 0, worker.text()
    with worker_process(env, tmp_path, *args, name="next"):
        await handle.result()
    shown = run_cli(["show", "stop1", "--store", store], dev.env)
    assert shown.returncode == 0, shown.stderr
    assert "done: settled 5 EUR" in shown.stdout, shown.stdout
    assert "WorkerShutdown" not in shown.stdout, shown.stdout


async def test_a_second_sigterm_stops_the_worker_at_once(dev: Dev, tmp_path: Path) -> None:
    """An operator who will not wait for the grace signals again: the process ends now (exit
    143, as a crash; the call is retried once its heartbeat times out), also as a container's
    PID 1, which the signal's default action would not end."""
    queue, store = f"ops-stop2-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    args = ["--app", f"{OPS_APP}:app", "--store", store, "--task-queue", queue]
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path)}
    client = await _client(dev)
    with worker_process(env, tmp_path, *args, "--shutdown-grace", "60") as worker:
        handle = await client.start_workflow(
            "durable_agent.run",
            {"session_id": "stop2", "agent": "settle", "text": "pay"},
            id=f"durable-agent/stop2/run/{secrets.token_hex(4)}",
            task_queue=queue,
        )
        wait_until(lambda: (tmp_path / "started").exists(), within=60, what="the tool to start")
        worker.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "stopping" in worker.text(), within=10, what="the stop to begin")
        assert not worker.ready.exists()
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.proc.wait(10) == 128 + signal.SIGTERM, worker.text()
    await handle.terminate()


@contextmanager
def _as_pid_1(args: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``durable-agent worker ARGS`` as PID 1 of a PID namespace of its own, as in a container."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", *CLI, "worker", *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        except AssertionError as failed:  # what the worker said is the clue
            said = log.read_text(errors="replace")[-4000:]
            raise AssertionError(f"{failed}\nthe worker's log ends:\n{said}") from failed
        finally:
            with contextlib.suppress(OSError, IndexError, ValueError):  # the namespace's PID 1
                os.kill(_child(proc.pid), signal.SIGKILL)  # (killing unshare leaves it running)
            proc.kill()
            proc.wait()


def _child(pid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
async def test_a_second_sigterm_stops_a_containers_pid_1(dev: Dev, tmp_path: Path) -> None:
    """In a container the worker is PID 1, which no signal's default action ends: the second
    SIGTERM (which, before, only restored that default) must end it all the same."""
    ready, queue = tmp_path / "pid1.ready", f"ops-pid1-{secrets.token_hex(4)}"
    args = ["--app", f"{OPS_APP}:app", "--ready-file", str(ready), "--task-queue", queue]
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path), "DURABLE_AGENT_STORE": f"file:{tmp_path}"}
    # told its address, as a container is: dev's advertisement names a process its PID
    # namespace cannot see (read as stale), and the default port may be another server's
    env["TEMPORAL_ADDRESS"] = dev.info["address"]
    client = await _client(dev)
    with _as_pid_1([*args, "--shutdown-grace", "60"], env, tmp_path / "pid1.log") as proc:
        wait_until(ready.exists, within=60, what="the worker to poll")
        assert json.loads(ready.read_text())["pid"] == 1
        handle = await client.start_workflow(
            "durable_agent.run",
            {"session_id": "pid1", "agent": "settle", "text": "pay"},
            id=f"durable-agent/pid1/run/{secrets.token_hex(4)}",
            task_queue=queue,
        )
        wait_until((tmp_path / "started").exists, within=60, what="the tool to start")
        worker = _child(proc.pid)
        os.kill(worker, signal.SIGTERM)
        wait_until(lambda: not ready.exists(), within=10, what="the stop to begin")
        os.kill(worker, signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
    await handle.terminate()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_sigterm_stops_a_containers_pid_1_waiting_for_temporal(dev: Dev, tmp_path: Path) -> None:
    """``docker stop`` while the worker waits for a Temporal not up yet: it exits at once, where
    before PID 1 ignored the signal until the stop's SIGKILL."""
    args = ["--app", f"{OPS_APP}:app", "--address", "127.0.0.1:1", "--connect-timeout", "60"]
    env = {**dev.env, "DURABLE_AGENT_STORE": f"file:{tmp_path}"}
    log = tmp_path / "pid1.log"
    with _as_pid_1(args, env, log) as proc:
        wait_until(lambda: (tmp_path / ".durable-agent-store-id").exists(), within=60, what="start")
        os.kill(_child(proc.pid), signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
    assert "stopped before it was ready" in log.read_text()


def test_a_ready_file_that_cannot_be_written_is_one_line(dev: Dev, tmp_path: Path) -> None:
    """Before, the worker served with every beat failing unseen: its check said "not up yet" for
    ever (an orchestrator restarts it in a loop) and nothing said why."""
    ready = tmp_path / "no-such-dir" / "worker.ready"
    args = ["worker", "--app", f"{OPS_APP}:app", "--ready-file", str(ready)]
    args += ["--store", f"file:{tmp_path / 'sessions'}", "--task-queue", "ops-ready"]
    result = run_cli(args, dev.env, timeout=30)
    assert result.returncode == 1, result.stdout + result.stderr
    first = result.stderr.splitlines()[0]
    assert f"cannot write the ready file {ready}" in first, result.stderr
    assert "Traceback" not in result.stderr


async def test_run_leaf_at_a_going_runs_answered_call_is_refused(dev: Dev, tmp_path: Path) -> None:
    """``run --leaf`` naming a call a going run has answered (its result stored, the reply still
    coming): a run from a call goes on from its stored results, here the going run's tail
    (docs/design.md#repair-and-reconcile), so it is refused as a run from the tail is. Before, it
    started there: its question a sibling of the going run's reply, which the going run's own
    ``run`` printed as a message delivered into it, and then printed the other run's reply."""
    queue, store = f"ops-leaf-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    args = ["--app", f"{OPS_APP}:app", "--store", store, "--task-queue", queue]
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path)}
    client = await _client(dev)
    with worker_process(env, tmp_path, *args):
        handle = await client.start_workflow(
            "durable_agent.run",
            {"session_id": "leaf1", "agent": "ponder", "text": "go"},
            id="durable-agent/leaf1/run/first",
            task_queue=queue,
        )
        wait_until(lambda: (tmp_path / "answering").exists(), within=60, what="the reply due")
        shown = _json(run_cli(["show", "leaf1", "--json", "--store", store], env))
        call = next(e["id"] for e in shown["entries"] if e["message"]["role"] == "assistant")
        flags = ["--agent", "ponder", "--task-queue", queue, "--store", store]
        second = run_cli(["run", "leaf1", "hello", "--leaf", call, *flags], env)
        (tmp_path / "release").touch()
        await handle.result()
        assert second.returncode == 1, second.stdout + second.stderr
        assert "has a run going" in second.stderr and "Traceback" not in second.stderr
        after = json.dumps(
            _json(run_cli(["show", "leaf1", "--tree", "--json", "--store", store], env))
        )
        assert "hello" not in after and "quick" not in after


async def test_approve_goes_on_with_the_agent_that_asked(dev: Dev, tmp_path: Path) -> None:
    """A run of the app's own agent parks on a call waiting for a person; ``approve`` (no
    ``--agent``) stores the decision and starts the run that goes on. It started it as the
    default agent, ``demo``, which this worker has not: the run failed and the call never ran.
    The parked run's ``run`` says it stopped waiting (it ended silently, exit 0, as if the turn
    were done), and a new message meanwhile is refused in the CLI's words (it quoted the
    library's: "pending_approvals()", "run() with no input")."""
    queue, store = f"ops-ask-{secrets.token_hex(4)}", f"file:{tmp_path / 'sessions'}"
    flags = ["--store", store, "--task-queue", queue]
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path)}
    with worker_process(env, tmp_path, "--app", f"{OPS_APP}:app", *flags):
        asked = run_cli(["run", "ask1", "refund it", "--agent", "refunder", *flags], env)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        [pending] = _json(run_cli(["approvals", "ask1", "--json", "--store", store], env))
        call = pending["tool_call_id"]  # what the waiting run said to approve by
        assert f"waits for approval: call {call}" in " ".join(asked.stdout.split()), asked.stdout
        # it parked: `run` says so and how to go on (it ended as if the turn were done)
        said = " ".join(asked.stderr.split())
        assert "the run parked" in said, said
        assert f"durable-agent approve|deny ask1 {call}" in said.split("parked")[1], said
        again = run_cli(["run", "ask1", "and another", "--agent", "refunder", *flags], env)
        assert again.returncode == 1, again.stdout + again.stderr
        told = " ".join(again.stderr.split())  # in the CLI's words, not the library's
        assert f"refund ({call}) waits for a decision" in told, told
        assert f"durable-agent approve|deny ask1 {call}" in told, told
        assert "pending_approvals()" not in told and "Traceback" not in told, told
        decided = run_cli(["approve", "ask1", call, *flags], env)
        assert decided.returncode == 0, decided.stdout + decided.stderr
        assert "continuing in run" in decided.stdout and "done: refunded 250" in decided.stdout
    shown = json.dumps(_json(run_cli(["show", "ask1", "--json", "--store", store], env)))
    assert "done: refunded 250" in shown
