"""The README's HTTP walkthrough (the ``bash`` block of "Serving a front-end") as a user runs it:
``durable-agent serve`` with the block's own arguments and keys file, each ``curl`` command as
written (run by ``bash``, ``$KEY`` set as the block sets it), only the port and the placeholders
(``RUN_ID``, ``CALL_ID``, ``OTHER_CALL_ID``) filled in; what each comment says the answer is,
checked. The commands are read from the README, so the test breaks when the README drifts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode

from durable_agent.ai import ModelRequest, Reply, ScriptedModel, ToolCall, tool
from durable_agent.durable import DEFAULT_COMPACT_PROMPT
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from durable_agent.workflows.executor import run_workflow_id
from tests.cli.support import CLI, cli_env
from tests.server.support import Reader, ended, free_port, read_sse_lines
from tests.support.polling import eventually
from tests.support.temporal import running_worker

pytestmark = pytest.mark.temporal

README = Path(__file__).resolve().parents[2] / "README.md"
QUESTION = "What is the weather in Paris?"
ANSWER = "Sunny in Paris; Lisbon too."
SUMMARY = "They asked about the weather."
START = "/runs$"


def walkthrough() -> str:
    found = re.search(
        r"^```bash\n(durable-agent serve --keys .*?)^```$", README.read_text(), re.M | re.S
    )
    assert found, "README: no bash block starting with `durable-agent serve --keys`"
    return found.group(1)


def curls(block: str) -> list[str]:
    """The block's curl commands, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", "", block)
    return [line for line in joined.splitlines() if line.startswith("curl ")]


class Walkthrough:
    """The block's commands, run against ``port`` with ``key`` (the block's ``KEY=`` line)."""

    def __init__(self, block: str, port: int) -> None:
        self.commands = curls(block)
        self.port = port
        found = re.search(r"^KEY='(.*)'$", block, re.M)
        assert found, block
        self.key = found.group(1)

    def command(self, part: str, **fill: str) -> str:
        """The one command ``part`` (a pattern) finds, placeholders filled."""
        matching = [c for c in self.commands if re.search(part, c)]
        assert len(matching) == 1, f"README: {len(matching)} curl commands match {part!r}"
        found = matching[0]
        found = found.replace("localhost:8000", f"localhost:{self.port}")
        for name, value in fill.items():
            assert name in found, (name, found)
            found = found.replace(name, value)
        return found

    async def run(self, part: str, **fill: str) -> tuple[int, Any]:
        """A command's status and JSON body (``None`` when empty)."""
        cmd = self.command(part, **fill).replace("curl ", "curl -w '\\n%{http_code}' ", 1)
        done = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            cmd,
            env={"KEY": self.key, "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(done.communicate(), 60)
        body, _, code = out.decode().rpartition("\n")
        return int(code), json.loads(body) if body else None

    @asynccontextmanager
    async def stream(self, part: str, **fill: str) -> AsyncIterator[Reader]:
        """A streaming command's frames while the block runs; its curl is ended after."""
        cmd = "exec " + self.command(part, **fill)
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            cmd,
            env={"KEY": self.key, "PATH": "/usr/bin:/bin"},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # curl's progress meter: to a terminal it shows none
        )
        reader = Reader()
        assert proc.stdout is not None
        task = asyncio.create_task(_read_sse(proc.stdout, reader))
        try:
            yield reader
        finally:
            with contextlib.suppress(ProcessLookupError):  # a deleted session's stream ended
                proc.send_signal(signal.SIGTERM)
            await proc.wait()
            await task


async def _read_sse(out: asyncio.StreamReader, reader: Reader) -> None:
    await read_sse_lines((raw.decode().rstrip("\r\n") async for raw in out), reader)


def _status(run_id: str, status: str) -> Callable[[Reader], bool]:
    return lambda r: any(
        f.event == "run" and f.data["run_id"] == run_id and f.data["status"] == status
        for f in r.frames
    )


def _stopped(handle: WorkflowHandle[Any, Any]) -> Callable[[], Awaitable[bool]]:
    """A probe: the run's workflow no longer runs (cancelled, or gone: a session's delete
    deletes its runs' histories too)."""

    async def probe() -> bool:
        try:
            return (await handle.describe()).status == WorkflowExecutionStatus.CANCELED
        except RPCError as exc:
            return exc.status == RPCStatusCode.NOT_FOUND

    return probe


def _text(entry: dict[str, Any]) -> str:
    """A message entry's text ("" for any other entry)."""
    parts = entry.get("message", {}).get("content", [])
    return "".join(p.get("text", "") for p in parts)


def _model(request: ModelRequest) -> Reply:
    asked = request.messages[-1].text()
    if asked == DEFAULT_COMPACT_PROMPT:
        return Reply(text=SUMMARY)
    if asked == QUESTION:
        calls = [("call-1", "Paris"), ("call-2", "Rome")]
        return Reply(
            tool_calls=[ToolCall(id=i, name="weather", arguments={"city": c}) for i, c in calls]
        )
    return Reply(text=ANSWER, chunk_size=4, chunk_delay=0.01)


@asynccontextmanager
async def serving(
    block: str, tmp_path: Path, temporal: Client
) -> AsyncIterator[tuple[int, asyncio.Event, asyncio.Event]]:
    """The block's ``serve`` line (its port replaced) with its keys file, beside a worker of
    agent ``demo``, whose ``weather`` tool asks approval and holds each call until released.
    Yields the port and the tool's started and release events."""
    keys = re.search(r"^# keys\.json: (.*)$", block, re.M)
    assert keys, block
    (tmp_path / "keys.json").write_text(keys.group(1))
    started, release = asyncio.Event(), asyncio.Event()

    @tool(approval=True)
    async def weather(city: str) -> str:
        """The weather in a city."""
        started.set()
        await release.wait()
        return f"sunny in {city}"

    port, queue, store = free_port(), f"test-{uuid.uuid4().hex[:12]}", tmp_path / "sessions"
    line = block.splitlines()[0].split("#")[0].replace("--port 8000", f"--port {port}")
    args = shlex.split(line)
    assert args[0] == "durable-agent", line
    env = cli_env(
        tmp_path,
        TEMPORAL_ADDRESS=temporal.service_client.config.target_host,
        TEMPORAL_NAMESPACE=temporal.namespace,
        DURABLE_AGENT_STORE=f"file:{store}",
        DURABLE_AGENT_TASK_QUEUE=queue,
    )
    spec = AgentSpec(model=ScriptedModel(_model), tools=[weather])
    log = tmp_path / "serve.log"
    async with running_worker(temporal, FileStore(store), {"demo": spec}, task_queue=queue):
        with log.open("w") as out:
            proc = await asyncio.create_subprocess_exec(
                *CLI, *args[1:], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            await eventually(_said(log, " ready on http://"), within=60, what="serve")
            yield port, started, release
        finally:
            release.set()
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), 30)


def _said(log: Path, text: str) -> Callable[[], Awaitable[bool | None]]:
    async def probe() -> bool | None:
        return text in await asyncio.to_thread(log.read_text) or None

    return probe


async def test_the_readme_http_walkthrough_answers_as_its_comments_say(
    temporal_client: Client, tmp_path: Path
) -> None:
    temporal, block = temporal_client, walkthrough()
    async with serving(block, tmp_path, temporal) as (port, started, release):
        w = Walkthrough(block, port)
        assert len(w.commands) == 13, w.commands
        # start a run: 202 {"run_id"}; the same request again answers that run
        assert await w.run(START) == (202, {"run_id": "q-1"})
        assert await w.run(START) == (202, {"run_id": "q-1"})
        async with w.stream(r"stream\?after=0$") as reader:
            waiting = _status("q-1", "awaiting_approval")
            await reader.until(lambda r: r.live and waiting(r), within=60)
            for frame in reader.frames:
                if frame.event == "entry":
                    assert frame.id == str(frame.data["seq"]), frame

            # a run's status
            assert await w.run("/runs/q-1$") == (
                200,
                {"run_id": "q-1", "status": "awaiting_approval"},
            )
            # resume after seq 3: exactly the entries after it, then live; a seq past the
            # session's last entry: 400 InvalidLastEventIdError
            async with w.stream("Last-Event-ID: 3") as resumed:
                await resumed.until(lambda r: r.live, within=30)
            assert resumed.entries() == [(s, e) for s, e in reader.entries() if s > 3]
            code, body = await w.run(
                "Last-Event-ID: 3", **{"Last-Event-ID: 3": "Last-Event-ID: 99"}
            )
            assert (code, body["error"]["type"]) == (400, "InvalidLastEventIdError"), body

            await _decides_and_steers(w, reader, started, release)
            await _reads_compacts_and_deletes(w, reader, temporal)


async def _decides_and_steers(
    w: Walkthrough, reader: Reader, started: asyncio.Event, release: asyncio.Event
) -> None:
    """The approvals and the message commands, on run q-1 waiting for two decisions."""
    # calls waiting, and decisions as the key's principal
    code, body = await w.run("/approvals$")
    assert code == 200, body
    assert [p["tool_call_id"] for p in body["pending"]] == ["call-1", "call-2"]
    code, body = await w.run("/CALL_ID", CALL_ID="call-1")
    assert code == 200 and body["kind"] == "approval_decision", body
    assert body["approved"] is True and body["decided_by"] == "ann", body
    edited = {'"approved": false,': '"approved": false, "args": {"city": "Oslo"},'}
    code, body = await w.run("OTHER_CALL_ID", OTHER_CALL_ID="call-2", **edited)
    assert code == 422, body
    code, body = await w.run("OTHER_CALL_ID", OTHER_CALL_ID="call-2")
    assert code == 200 and body["approved"] is False, body
    assert body["reason"] == "not before the audit" and body["decided_by"] == "ann", body

    # while the approved call works: compact answers 409, a message 202 {"message_id"}
    await asyncio.wait_for(started.wait(), 60)
    code, body = await w.run("/compact")
    assert code == 409, body
    code, body = await w.run("/messages")
    assert code == 202 and body["message_id"], body
    release.set()
    await reader.until(ended("q-1"), within=60)
    assert _status("q-1", "completed")(reader)
    # the message stored after the turn's tool results; no live text after the reply's
    # entry; the question asked once though its request was sent twice
    roles = [(e["message"]["role"], _text(e)) for _, e in reader.entries() if "message" in e]
    assert roles[-4:] == [
        ("tool_result", "sunny in Paris"),
        ("tool_result", "tool call denied: not before the audit"),
        ("user", "Also check Lisbon."),
        ("assistant", ANSWER),
    ], roles
    assert [t for r, t in roles if r == "user"] == [QUESTION, "Also check Lisbon."]
    reply = next(i for i, f in enumerate(reader.frames) if _text(f.data.get("entry", {})) == ANSWER)
    assert not [f for f in reader.frames[reply:] if f.event == "delta"]


async def _reads_compacts_and_deletes(w: Walkthrough, reader: Reader, temporal: Client) -> None:
    """The read, cancel, compact, fork and delete commands, once run q-1 ended."""
    # a read: every entry, none more
    code, body = await w.run("/entries")
    assert code == 200 and body["more"] is False, body
    assert [(x["seq"], x["entry"]) for x in body["entries"]] == reader.entries()
    # cancel: 202 for a run that ended, 404 for one the session never had
    assert (await w.run("/cancel", RUN_ID="q-1"))[0] == 202
    code, body = await w.run("/cancel", RUN_ID="q-never")
    assert (code, body["error"]["type"]) == (404, "RunNotFoundError"), body
    # compact: the turns before the last (the steer began it) summarized, the entry
    # answered and streamed; then nothing is left to compact
    code, body = await w.run("/compact")
    assert code == 200 and body["entry"]["summary"] == SUMMARY, body
    steer = next(e for _, e in reader.entries() if _text(e) == "Also check Lisbon.")
    assert body["entry"]["first_kept_id"] == steer["id"], body
    await reader.until(lambda r: r.entries()[-1][1] == body["entry"], within=30)
    assert await w.run("/compact") == (200, {"entry": None})
    code, body = await w.run("/fork")
    assert code == 201 and body["session_id"] != "acme:s1", body
    # delete: also cancels its runs (one waiting for a decision here)
    assert await w.run(START, **{'"q-1"': '"q-2"'}) == (202, {"run_id": "q-2"})
    await reader.until(_status("q-2", "awaiting_approval"), within=60)
    code, body = await w.run("-X DELETE")
    assert code == 204 and body is None
    handle = temporal.get_workflow_handle(run_workflow_id("acme:s1", "q-2"))
    await eventually(_stopped(handle), within=30, what="q-2 stopped")
    code, body = await w.run("/entries")
    assert code == 404, body
