"""``durable-agent dev`` serves the chat page beside the Temporal UI and says where."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.cli.support import running_dev
from tests.server.support import stream

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
