"""``durable-agent dev`` serves the chat page beside the Temporal UI and says where;
``durable-agent serve`` as an operator runs it: its log, and what stops it from starting."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from tests.cli.support import CLI, cli_env, run_cli, running_dev, wait_dead
from tests.cli.test_operations import STAMP
from tests.server.support import stream
from tests.support.ferretdb import free_port
from tests.support.polling import eventually
from tests.temporal.test_outages import DevServer

pytestmark = pytest.mark.temporal


async def test_dev_prints_the_chat_url_and_serves_the_demo_agent(tmp_path: Path) -> None:
    with running_dev(tmp_path) as dev:
        found = re.search(r"chat\s+(http://127\.0\.0\.1:\d+/)", dev.log.read_text())
        assert found, dev.log.read_text()
        async with httpx.AsyncClient(base_url=found.group(1)) as client:
            page = await client.get("/")
            assert page.status_code == 200 and "durable-agent" in page.text
            started = await client.post("/v1/sessions/dev-1/runs", json={"text": "hello"})
            assert started.status_code == 202, started.text
            async with stream(client, "dev-1", after=0) as reader:
                await reader.until(
                    lambda r: any(
                        e["message"]["role"] == "assistant" and not e["message"].get("tool_calls")
                        for _, e in r.entries()
                    ),
                    within=60,
                )


async def test_serve_logs_a_temporal_outage_once_a_request(tmp_path: Path) -> None:
    """Temporal gone while ``serve`` runs: a run start answers 503 and the server logs it in one
    line. The Temporal core's own retries of the call came too, five lines a request in
    terminal colour codes (``gRPC call start_workflow_execution retried 5 times``), burying it.
    Every line has its time, level and logger, as a worker's (they had none)."""
    temporal = DevServer(tmp_path / "temporal.db", tmp_path / "temporal.log")
    temporal.start()
    try:
        await temporal.ready()
        port, log = free_port(), tmp_path / "serve.out"
        env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal.address)
        args = ["serve", "--port", str(port), "--store", f"file:{tmp_path / 's'}"]
        with log.open("w") as out:
            proc = await asyncio.create_subprocess_exec(
                *CLI, *args, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            await eventually(_said(log, " ready on http://"), within=60, what="serve")
            started = len(log.read_text().splitlines())
            temporal.kill()
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
                body = {"text": "hello", "agent": "demo"}
                answer = await c.post("/v1/sessions/s1/runs", json=body)
            assert answer.status_code == 503, answer.text
            text = log.read_text()
        finally:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), 30)
    finally:
        temporal.stop()
    for line in text.splitlines():
        assert re.match(STAMP, line), f"no time stamp, level and logger: {line!r}"
    [said] = text.splitlines()[started:]
    assert " WARNING durable_agent.server: POST /v1/sessions/s1/runs: 503: RPCError: " in said


def _said(log: Path, text: str) -> Callable[[], Awaitable[bool | None]]:
    async def probe() -> bool | None:
        return text in await asyncio.to_thread(log.read_text) or None

    return probe


async def test_serve_on_ipv6_loopback_prints_a_url_that_opens_the_page(tmp_path: Path) -> None:
    """``serve --host ::1`` printed ``http://::1:8000/``, which no browser or client opens."""
    temporal = DevServer(tmp_path / "temporal.db", tmp_path / "temporal.log")
    temporal.start()
    try:
        await temporal.ready()
        port, log = free_port(), tmp_path / "serve.out"
        env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal.address)
        args = ["serve", "--host", "::1", "--port", str(port), "--store", f"file:{tmp_path / 's'}"]
        with log.open("w") as out:
            proc = await asyncio.create_subprocess_exec(
                *CLI, *args, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            await eventually(_said(log, " ready on http://"), within=60, what="serve")
            found = re.search(r" ready on (\S+):", log.read_text())
            assert found, log.read_text()
            assert found.group(1) == f"http://[::1]:{port}/", log.read_text()
            async with httpx.AsyncClient() as client:
                page = await client.get(found.group(1))
            assert page.status_code == 200 and "durable-agent" in page.text
        finally:
            proc.send_signal(signal.SIGINT)
            await asyncio.wait_for(proc.wait(), 30)
    finally:
        temporal.stop()


async def test_serve_refuses_a_namespace_temporal_has_not(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A mistyped ``--namespace``: ``serve`` stops at start with one line naming it (exit 1), as
    the worker does. It started, then answered every run start 503 "try again in a moment"."""
    address = temporal_client.service_client.config.target_host
    args = ["serve", "--port", str(free_port()), "--store", f"file:{tmp_path / 's'}"]
    args += ["--address", address, "--namespace", "nosuch-ns"]
    result = await asyncio.to_thread(run_cli, args, cli_env(tmp_path), 60)
    assert result.returncode == 1, result.stdout + result.stderr
    said = [line for line in result.stderr.splitlines() if "does not exist" in line]
    assert len(said) == 1 and "namespace 'nosuch-ns'" in said[0], result.stderr
    assert address in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert "ready on" not in result.stdout + result.stderr


async def test_serve_logs_json_with_uvicorns_lines_and_no_secret(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``serve --log-format json``: every line one JSON object (time, level, logger, message),
    uvicorn's own among them (a request it cannot parse), and no store password or key. Its
    lines were plain text, uvicorn's in its own format ("WARNING:  Invalid HTTP ...")."""
    port, log = free_port(), tmp_path / "serve.out"
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host)
    store = "mongodb://u:Xy9Secret@127.0.0.1:1/db?connectTimeoutMS=200"
    args = ["serve", "--port", str(port), "--store", store, "--log-format", "json"]
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, "--agent", "demo", env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        await eventually(_said(log, "ready on http://"), within=60, what="serve")
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            down = await c.get("/v1/sessions")  # the store cannot be reached: 503, logged
        assert down.status_code == 503, down.text
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await eventually(_said(log, "Invalid HTTP request"), within=30, what="uvicorn's line")
        writer.close()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    text = log.read_text()
    records = [json.loads(line) for line in text.splitlines()]
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
    loggers = {r["logger"]: r for r in records}
    assert loggers["uvicorn.error"]["level"] == "WARNING", records
    assert "StoreUnavailableError" in loggers["durable_agent.server"]["message"], records
    assert "Xy9Secret" not in text, text
    assert "u:***@127.0.0.1:1" in text, text


async def test_serve_says_at_start_when_no_worker_polls_its_queue(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A mistyped ``--task-queue`` (or no worker started): every run would wait with no sign of
    why; ``serve`` says so once at start, as ``run`` does."""
    queue = f"nobody-{uuid.uuid4().hex[:8]}"
    port, log = free_port(), tmp_path / "serve.out"
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host)
    args = ["serve", "--port", str(port), "--store", f"file:{tmp_path / 's'}"]
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, "--task-queue", queue, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        await eventually(_said(log, " ready on http://"), within=60, what="serve")
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 30)
    said = [line for line in log.read_text().splitlines() if "no worker polls" in line]
    assert len(said) == 1 and " WARNING " in said[0] and repr(queue) in said[0], said


@pytest.mark.parametrize("where", ["in use", "no such host"])
async def test_serve_that_cannot_listen_says_where_in_one_line(
    temporal_client: Client, tmp_path: Path, where: str
) -> None:
    """A port another process holds, or a host that is no address: one error line naming
    ``host:port`` and why, exit 1. uvicorn logged it in its own format and exited 3, the
    code this CLI gives a session that does not exist."""
    address = temporal_client.service_client.config.target_host
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"sk-test-key-1": {"principal": "ann", "prefix": ""}}))
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        host = "127.0.0.1" if where == "in use" else "nosuch.invalid"
        args = ["serve", "--host", host, "--port", str(port), "--keys", str(keys)]
        args += ["--store", f"file:{tmp_path / 's'}", "--address", address]
        result = await asyncio.to_thread(run_cli, args, cli_env(tmp_path), 60)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, result.stderr
    assert f"cannot listen on {host}:{port}: " in errors[0], errors
    assert "uvicorn" not in result.stderr and "Traceback" not in result.stderr, result.stderr


async def test_dev_stopped_while_a_chat_page_streams_ends_the_stream_cleanly(
    tmp_path: Path,
) -> None:
    """Ctrl-C on ``dev`` while a page follows a session: the stream ends as a server's stop
    ends it (the page comes back to the next server), and ``dev`` stops. The stream was cut
    after uvicorn's 5 s grace instead, and ``dev`` printed uvicorn's 60-line traceback of it
    ("Exception in ASGI application ... timeout graceful shutdown exceeded")."""
    with running_dev(tmp_path) as dev:
        found = re.search(r"chat\s+(http://127\.0\.0\.1:\d+/)", dev.log.read_text())
        assert found, dev.log.read_text()
        async with httpx.AsyncClient(base_url=found.group(1), timeout=60) as client:
            made = await client.post("/v1/sessions", json={"session_id": "d1"})
            assert made.status_code == 201, made.text
            async with client.stream("GET", "/v1/sessions/d1/stream?after=0") as response:
                lines = response.aiter_lines()
                while await anext(lines) != ": live":
                    pass
                dev.proc.send_signal(signal.SIGINT)
                rest = [line async for line in lines]  # a cut stream raises here
        assert await asyncio.to_thread(dev.proc.wait, 60) == 0, dev.log.read_text()
    assert ": live" not in rest and "Traceback" not in dev.log.read_text(), dev.log.read_text()


@asynccontextmanager
async def _serving(
    temporal_client: Client, tmp_path: Path, *extra: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, Path]]:
    """``durable-agent serve`` in a process of its own, ready; its process, port and log."""
    port, log = free_port(), tmp_path / "serve.out"
    env = cli_env(tmp_path, TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host)
    args = ["serve", "--port", str(port), "--store", f"file:{tmp_path / 's'}", *extra]
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            *CLI, *args, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        ready = _said(log, " ready on http://")

        async def up() -> bool | None:
            return proc.returncode is not None or await ready()

        await eventually(up, within=60, what="serve")
        assert proc.returncode is None, log.read_text()
        yield proc, port, log
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()


async def _body_awaited(
    port: int, body: bytes
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A session's creation sent up to its body, which the app is reading when this returns
    (it asked for it: ``100 Continue``): a request in flight."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (port, len(body))
    )
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 ")
    return reader, writer


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serve_stopped_answers_what_is_in_flight_ends_its_streams_and_exits_0(
    temporal_client: Client, tmp_path: Path, sig: signal.Signals
) -> None:
    """A deploy's SIGTERM (or Ctrl-C) on ``serve``: open streams end, a request in flight gets
    its answer, and the process exits 0 once it has closed its store. It exited 143 (uvicorn
    raised the signal again once stopped), a failed stop to systemd and an error to Kubernetes;
    on Ctrl-C it printed "interrupted" and exited 130."""
    body = json.dumps({"session_id": "late"}).encode()
    async with _serving(temporal_client, tmp_path) as (proc, port, log):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            made = await client.post("/v1/sessions", json={"session_id": "s1"})
            assert made.status_code == 201, made.text
            async with client.stream("GET", "/v1/sessions/s1/stream?after=0") as response:
                lines = response.aiter_lines()
                while await anext(lines) != ": live":
                    pass
                reader, writer = await _body_awaited(port, body)
                proc.send_signal(sig)
                rest = [line async for line in lines]  # a cut stream raises here
        writer.write(body)
        answer = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        code = await asyncio.wait_for(proc.wait(), 30)
    text = log.read_text()
    assert answer.startswith(b"HTTP/1.1 201 "), answer
    assert code == 0, text
    assert ": live" not in rest and "Traceback" not in text, text
    assert re.search(rf"serve {proc.pid} stopping", text), text


async def test_serve_stops_at_once_on_a_second_signal(
    temporal_client: Client, tmp_path: Path
) -> None:
    """A second SIGTERM while ``serve`` waits for a request in flight ends it there and then
    (exit 143, as the worker's), saying so: uvicorn ignored it and waited out its grace."""
    async with _serving(temporal_client, tmp_path) as (proc, port, log):
        reader, writer = await _body_awaited(port, b"{}")
        proc.send_signal(signal.SIGTERM)
        await eventually(_said(log, " stopping"), within=30, what="the first signal taken")
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 3)  # under the 5 s grace for requests
        assert await reader.read() == b""  # no answer: the request was cut, as by a crash
        writer.close()
    assert code == 128 + signal.SIGTERM, log.read_text()
    assert "stopped at once (a second signal)" in log.read_text()


async def test_serve_limit_concurrency_answers_503_over_it(
    temporal_client: Client, tmp_path: Path
) -> None:
    """``serve --limit-concurrency 3``: with a stream open and a request in flight, a third
    connection's request is answered 503 at once, and the ones under the limit are served."""
    limited = _serving(temporal_client, tmp_path, "--limit-concurrency", "3")
    async with (
        limited as (_, port, _),
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
    ):
        made = await client.post("/v1/sessions", json={"session_id": "s1"})
        assert made.status_code == 201, made.text
        async with client.stream("GET", "/v1/sessions/s1/stream?after=0") as response:
            lines = response.aiter_lines()
            while await anext(lines) != ": live":
                pass
            reader, writer = await _body_awaited(port, b'{"session_id": "s2"}')
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as other:
                over = await other.get("/v1/sessions")
            writer.write(b'{"session_id": "s2"}')
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n"), 30)
            writer.close()
    assert over.status_code == 503, over.text
    assert answer.startswith(b"HTTP/1.1 201 "), answer


async def test_dev_stops_at_once_on_a_second_signal(tmp_path: Path) -> None:
    """A second Ctrl-C while ``dev`` waits for a request in flight on its chat page ends it
    there and then (exit 130), its server and worker following by themselves: it was ignored
    until the request's grace, the worker's and the server's stops had run their course. Its
    output is a pipe's, buffered: what it said must not be lost with the process."""
    log = tmp_path / "dev.out"
    with log.open("w") as out:
        proc = await asyncio.create_subprocess_exec(
            *CLI, "dev", env=cli_env(tmp_path, PYTHONUNBUFFERED=""), stdout=out, stderr=out
        )
    try:
        await eventually(_said(log, "durable-agent chat my-session"), within=90, what="dev")
        found = re.search(r"chat\s+http://127\.0\.0\.1:(\d+)/", log.read_text())
        worker = re.search(r"worker\s+pid (\d+)", log.read_text())
        assert found and worker, log.read_text()
        info = json.loads((tmp_path / "durable-agent" / "server.json").read_text())
        children = [int(worker.group(1)), int(info["pid"])]
        _, writer = await _body_awaited(int(found.group(1)), b"{}")
        proc.send_signal(signal.SIGINT)
        await eventually(_said(log, "stopping"), within=30, what="the first signal taken")
        proc.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(proc.wait(), 3)  # under the 5 s grace for requests
        writer.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert code == 128 + signal.SIGINT, log.read_text()
    assert "stopped at once (a second signal)" in log.read_text()
    assert await asyncio.to_thread(wait_dead, children) == [], "its children outlived it"


async def test_serve_stopped_while_it_starts_exits_at_once_saying_so(tmp_path: Path) -> None:
    """A SIGTERM while ``serve`` connects to a Temporal that does not answer yet ends it at once
    with a line (exit 143): before, it was the signal's default action, which a container's
    PID 1 has not, so a ``docker stop`` then waited for its SIGKILL."""
    with socket.socket() as silent:  # takes connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        log = tmp_path / "serve.out"
        args = ["serve", "--port", str(free_port()), "--store", f"file:{tmp_path / 's'}"]
        with log.open("w") as out:
            proc = await asyncio.create_subprocess_exec(
                *CLI,
                *args,
                "--address",
                address,
                env=cli_env(tmp_path),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            await eventually(_said(log, "no --agent"), within=60, what="serve connecting")
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 10)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    assert code == 128 + signal.SIGTERM, log.read_text()
    assert re.search(rf"serve {proc.pid} stopped before it was ready", log.read_text())
