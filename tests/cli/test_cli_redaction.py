"""A provider echoing the worker's key, partially masked, cut or encoded, reaches neither
Temporal history nor the CLI's output.

A real ``durable-agent worker`` (the demo app, on the OpenAI adapter) calls a local server that
answers 401 with ``Invalid API Key: gsk_b72f0b********Yodd``, the way an OpenAI-compatible
provider masks the key it rejected, followed by the key without its prefix, a slice of its
middle, the ``Authorization`` header in base64 and the key URL-encoded (the replay server's
hostile echo); ``durable-agent run`` prints the run's failure.
"""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from temporalio.client import Client

from durable_agent.cli.render import print_error
from durable_agent.workflows import SEARCH_ATTRIBUTE
from tests.cli.support import CLI, cli_env, run_cli
from tests.providers.replay_server import ECHOES, RecordedResponse, ReplayServer, echo
from tests.providers.test_redaction import fragments, groq_key, openai_key, runs_of
from tests.temporal.helpers import fetch_history_text

pytestmark = pytest.mark.temporal


def _run_with_a_worker(
    env: dict[str, str], tmp_path: Path, session: str
) -> tuple[subprocess.CompletedProcess[str], str]:
    """``durable-agent run`` while a demo-app worker serves the queue; its result and the
    worker's log."""
    ready, log = tmp_path / "worker.ready", tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [*CLI, "worker", "--app", "durable_agent.cli.demo_app:app", "--ready-file", str(ready)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and worker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), log.read_text()
        return run_cli(["run", session, "hi", "--timeout", "60"], env), log.read_text()
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


async def test_a_masked_key_echo_reaches_neither_history_nor_the_cli(
    temporal_client: Client, tmp_path: Path
) -> None:
    key = groq_key()
    hostile = "; ".join(
        "{{%s}}" % name  # noqa: UP031 - the replay server's placeholders, braces included
        for name in ("key_unprefixed", "key_middle", "authorization_base64", "key_url")
    )
    body: dict[str, Any] = {
        "error": {
            "message": f"Invalid API Key: {key[:10]}********{key[-4:]} (echoed: {hostile})",
            "type": "auth",
        }
    }
    session, q = f"redact-{uuid.uuid4().hex[:8]}", f"redact-{uuid.uuid4().hex[:8]}"
    with ReplayServer() as replay:
        replay.enqueue(RecordedResponse.json(401, body, echo=True))
        env = cli_env(
            tmp_path / "home",
            TEMPORAL_ADDRESS=temporal_client.service_client.config.target_host,
            TEMPORAL_NAMESPACE=temporal_client.namespace,
            DURABLE_AGENT_STORE=f"file:{tmp_path / 'sessions'}",
            DURABLE_AGENT_TASK_QUEUE=q,
            OPENAI_API_KEY=key,
            OPENAI_BASE_URL=f"{replay.url}/v1",
        )
        result, worker_log = await asyncio.to_thread(_run_with_a_worker, env, tmp_path, session)
        assert replay.requests and replay.requests[0].headers["authorization"] == f"Bearer {key}"

    printed = result.stdout + result.stderr
    assert result.returncode == 1, printed
    assert "Invalid API Key: [redacted]" in printed
    query = f'{SEARCH_ATTRIBUTE} = "{session}"'
    ids = [w.id async for w in temporal_client.list_workflows(query)]
    assert ids, "the run is listed"
    histories = [await fetch_history_text(temporal_client.get_workflow_handle(i)) for i in ids]
    assert any("Invalid API Key: [redacted]" in h for h in histories)
    for fragment in fragments(key):
        assert fragment not in printed, fragment
        assert fragment not in worker_log, fragment
        for history in histories:
            assert fragment not in history, fragment
    for text in (printed, worker_log, *histories):
        assert runs_of(key, text) == []


def test_the_error_line_redacts_every_form_of_a_configured_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``error: …`` as the CLI prints it, for an error holding the process's key cut, sliced
    and encoded the ways a hostile provider echoes it."""
    key = openai_key()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    headers = {"authorization": f"Bearer {key}"}
    message = echo(" | ".join("{{%s}}" % n for n in sorted(ECHOES)).encode(), headers).decode()  # noqa: UP031
    screen = io.StringIO()
    print_error(Console(file=screen, width=400), f"openai: HTTP 401: {message}")
    printed = screen.getvalue()
    assert printed.startswith("error: openai: HTTP 401: [redacted]")
    assert runs_of(key, printed) == [], printed
