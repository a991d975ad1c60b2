"""Secrets never reach workflow histories (docs/design.md#temporal); oversized payloads fail loudly
and nothing is truncated (docs/design.md#bounded-history)."""

from __future__ import annotations

import io
import logging
import os
import secrets
from collections.abc import AsyncIterator

import pytest
from temporalio.client import Client

from durable_agent import (
    CompactError,
    ModelError,
    PayloadTooLargeError,
    Reply,
    ScriptedModel,
    new,
    tool,
)
from durable_agent.ai import ModelEvent, ModelRequest
from durable_agent.durable.limits import PAYLOAD_LIMIT, TEMPORAL_BLOB_LIMIT
from durable_agent.stores import MemoryStore
from durable_agent.workflows import SEARCH_ATTRIBUTE, AgentSpec, run_workflow_id
from durable_agent.workflows.worker_logs import LogFormat, WorkerLogFormatter
from tests.support.temporal import running_worker
from tests.temporal.helpers import (
    consume,
    eventually,
    executor,
    fetch_history_text,
    messages_of,
    queue,
    run_id,
    sid,
)

pytestmark = pytest.mark.temporal

LIMIT = PAYLOAD_LIMIT  # the default payload limit (1.5 MiB)
ENV_KEY = "DURABLE_AGENT_TEST_PROVIDER_KEY"


class KeyedModel:
    """A provider-like model holding an API key; it fails on cue with a sanitized ModelError."""

    def __init__(self, api_key: str) -> None:
        self.api_key = api_key
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.inner = ScriptedModel(self._respond)

    def _respond(self, request: ModelRequest) -> Reply:
        last = request.messages[-1].text()
        if last == "crash raw":  # an unsanitized error, as a buggy provider might raise
            raise RuntimeError(f"POST https://api.example/v1?key={self.api_key}: {self.headers}")
        if last == "please fail":
            return Reply(
                error=ModelError("upstream rejected the request (HTTP 401)", retryable=False)
            )
        if last.startswith("Summarize the conversation"):
            return Reply(text="a summary without secrets")
        if last == "use the tool":
            return Reply.call("lookup", {"q": "weather"}, id="l1")
        return Reply(text=f"visible answer to {last}")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        assert self.headers["Authorization"].endswith(self.api_key)  # the key is in use
        async for event in self.inner.stream(request):
            yield event


async def test_a_canary_key_never_appears_in_any_history(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    canary = f"sk-canary-{secrets.token_hex(12)}"  # built at run time: never in a source line
    env_canary = f"sk-env-canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(ENV_KEY, env_canary)

    @tool
    async def lookup(q: str) -> str:
        """Calls a service with the worker's credentials."""
        assert os.environ[ENV_KEY] == env_canary
        return f"the {q} is fine"

    store, q = MemoryStore(), queue()
    session = sid("canary")
    spec = AgentSpec(model=KeyedModel(canary), tools=[lookup], model_options={"temperature": 0})
    async with running_worker(
        temporal_client, store, {"keyed": spec}, task_queue=q, publisher=lambda e: None
    ):
        agent = await new(
            "keyed", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        ok = await consume(await agent.run("use the tool"))
        assert ok.error is None, repr(ok.error)
        failed = await consume(await agent.run("please fail"))
        assert isinstance(failed.error, ModelError)
        assert canary not in str(failed.error)
        raw = await consume(await agent.run("crash raw"))
        assert isinstance(raw.error, ModelError) and not raw.error.retryable
        assert str(raw.error) == "model call failed: RuntimeError"
        await agent.compact()
        await agent.branch(agent.leaf_id)
        child = await agent.fork()

        expected = {session: 6, child.session_id: 1}  # init, 3 runs, compact, branched | forked

        async def all_listed() -> dict[str, list[str]] | None:
            found: dict[str, list[str]] = {}
            for s, count in expected.items():
                query = f'{SEARCH_ATTRIBUTE} = "{s}"'
                found[s] = [w.id async for w in temporal_client.list_workflows(query)]
                if len(found[s]) < count:
                    return None
            return found

        listed = await eventually(all_listed, within=30, interval=0.2, what="every workflow listed")
        texts = {}
        for workflow_ids in listed.values():
            for wid in workflow_ids:
                texts[wid] = await fetch_history_text(temporal_client.get_workflow_handle(wid))

    kinds = sorted(
        w.split("/")[2] if w.startswith(f"durable-agent/{session}/") else "publish" for w in texts
    )
    assert kinds == ["compact", "publish", "publish", "publish", "run", "run", "run"]
    for wid, text in texts.items():
        assert canary not in text, f"the API key leaked into {wid}"
        assert env_canary not in text, f"the environment key leaked into {wid}"
        assert "Bearer" not in text, wid
    # the search reads decoded payloads: what did travel is found
    everything = "\n".join(texts.values())
    assert "the weather is fine" in everything
    assert "upstream rejected the request (HTTP 401)" in everything
    assert "a summary without secrets" in everything


def _oversized_model() -> ScriptedModel:
    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1].text()
        if last == "huge reply":
            return Reply(text="y" * (LIMIT + 10), chunk_size=LIMIT * 2)
        if last == "near the limit":  # the reply fits, its stored entry (with header) does not
            return Reply(text="z" * (LIMIT - 270), chunk_size=LIMIT * 2)
        if last == "big but fine":
            return Reply(text="w" * 1_000_000, chunk_size=2_000_000)
        if last == "huge tool":
            return Reply.call("dump", id="d1")
        return Reply(text="small")

    return ScriptedModel(respond)


@tool
async def dump() -> str:
    """Returns far too much."""
    return "x" * (LIMIT + 10)


async def test_oversized_payloads_raise_and_nothing_is_truncated(temporal_client: Client) -> None:
    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=_oversized_model(), tools=[dump])
    async with running_worker(temporal_client, store, {"big": spec}, task_queue=q):
        agent = await new(
            "big", store=store, session_id=sid("big"), executor=executor(temporal_client, q)
        )

        # a big reply under the limit is stored whole
        fine = await consume(await agent.run("big but fine"))
        assert fine.error is None, repr(fine.error)
        stored = await store.load_entries(agent.session_id)
        assert messages_of(stored)[-1].text() == "w" * 1_000_000

        cases = {
            "huge reply": ("model reply is", ["user"]),
            "near the limit": ("entry is", ["user"]),
            "huge tool": ("result of tool 'dump' is", ["user", "assistant", "tool_result"]),
        }
        for prompt, (what, roles) in cases.items():
            before = await store.load_entries(agent.session_id)
            outcome = await consume(await agent.run(prompt))
            assert isinstance(outcome.error, PayloadTooLargeError), (prompt, repr(outcome.error))
            assert what in str(outcome.error) and "payload limit" in str(outcome.error)
            after = await store.load_entries(agent.session_id)
            new_messages = messages_of(after[len(before) :])
            assert [m.role for m in new_messages] == roles, prompt
            assert new_messages[0].text() == prompt
            assert all(len(m.model_dump_json()) < 10_000 for m in new_messages)  # nothing cut
            assert agent.leaf_id == after[-1].id and not agent.running
        # the abandoned call is answered, saying why; the result was not cut
        result = messages_of(await store.load_entries(agent.session_id))[-1]
        assert result.is_error and result.tool_call_id == "d1"
        assert result.text().startswith("tool execution failed: PayloadTooLargeError: ")

        # an oversized input is refused before anything starts
        before = await store.load_entries(agent.session_id)
        with pytest.raises(PayloadTooLargeError):
            await agent.run("q" * (LIMIT + 1))
        assert await store.load_entries(agent.session_id) == before
        assert not agent.running

        # and the session still works
        last = await consume(await agent.run("hello"))
        assert last.error is None, repr(last.error)
        assert [m.text() for m in last.messages or []] == ["small"]


async def test_a_summary_over_the_limit_is_refused_after_one_summarizer_call(
    temporal_client: Client,
) -> None:
    """The summary is checked as it comes, like a model reply: one summarizer call (not one per
    retry of an activity whose result Temporal cannot take), a ``CompactError`` that names the
    payload limit, nothing stored, and the session still works."""
    summaries = 0

    def respond(request: ModelRequest) -> Reply:
        nonlocal summaries
        if request.messages[-1].text().startswith("Summarize"):
            summaries += 1
            big = TEMPORAL_BLOB_LIMIT + 10
            return Reply(text="s" * big, chunk_size=big)
        return Reply(text="small")

    store, q = MemoryStore(), queue()
    spec = AgentSpec(model=ScriptedModel(respond))
    async with running_worker(temporal_client, store, {"big": spec}, task_queue=q):
        agent = await new(
            "big", store=store, session_id=sid("sum"), executor=executor(temporal_client, q)
        )
        await consume(await agent.run("hello"))
        before = await store.load_entries(agent.session_id)
        with pytest.raises(CompactError, match="payload limit"):
            await agent.compact()
        assert summaries == 1
        assert await store.load_entries(agent.session_id) == before
        assert agent.entries() == before and not agent.running
        await agent.append("still usable")


async def test_a_tool_error_carrying_a_key_is_redacted_everywhere(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool whose client library puts the worker's credential in its error (a URL's
    ``?key=``, an ``Authorization`` header) fails the activity with the key redacted: not in the
    activity failure in history, the worker's log, nor the stored ``tool execution failed``
    result the model reads."""
    env_canary = f"sk-env-canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(ENV_KEY, env_canary)
    caplog.set_level(logging.INFO)

    @tool
    async def fetch(q: str) -> str:
        """Calls a service with the worker's credentials, and fails."""
        raise RuntimeError(f"GET https://api.example/v1?q={q}&key={os.environ[ENV_KEY]}: 401")

    def respond(request: ModelRequest) -> Reply:
        last = request.messages[-1]
        return Reply.call("fetch", {"q": "w"}, id="f1") if last.role == "user" else Reply(text="ok")

    store, q, session, rid = MemoryStore(), queue(), sid("toolkey"), run_id()
    spec = AgentSpec(model=ScriptedModel(respond), tools=[fetch])
    async with running_worker(temporal_client, store, {"a": spec}, task_queue=q):
        agent = await new(
            "a", store=store, session_id=session, executor=executor(temporal_client, q)
        )
        outcome = await consume(await agent.run("call it", run_id=rid))
        assert outcome.error is None, repr(outcome.error)
    result = messages_of(await store.load_entries(session))[-2]
    assert result.is_error and result.text().startswith("tool execution failed: RuntimeError: GET")
    assert env_canary not in result.text() and env_canary[:12] not in result.text()
    logged = "\n".join(
        r.getMessage() + str(r.exc_info[1] if r.exc_info else "") for r in caplog.records
    )
    assert "Completing activity as failed" in logged  # the failure was logged...
    assert env_canary[:12] not in logged  # ...without the key
    wid = run_workflow_id(session, rid)
    history = await fetch_history_text(temporal_client.get_workflow_handle(wid))
    assert "GET https://api.example/v1?q=w&key=" in history  # the failure is there, redacted
    assert env_canary[:12] not in history


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_the_worker_log_never_shows_a_key(
    temporal_client: Client, monkeypatch: pytest.MonkeyPatch, log_format: LogFormat
) -> None:
    """A provider raising something other than a ``ModelError`` (nobody sanitized it) is logged
    with its traceback, for the operator; the worker's log format (``durable-agent worker``)
    still shows none of the worker's keys, in text or JSON."""
    env_canary = f"sk-env-canary-{secrets.token_hex(12)}"
    monkeypatch.setenv(ENV_KEY, env_canary)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(WorkerLogFormatter(log_format))
    root = logging.getLogger()
    root.addHandler(handler)
    store, q = MemoryStore(), queue()
    try:
        async with running_worker(
            temporal_client, store, {"keyed": AgentSpec(model=KeyedModel(env_canary))}, task_queue=q
        ):
            agent = await new(
                "keyed", store=store, session_id=sid("log"), executor=executor(temporal_client, q)
            )
            raw = await consume(await agent.run("crash raw"))
    finally:
        root.removeHandler(handler)
    assert isinstance(raw.error, ModelError)
    logged = out.getvalue()
    assert "model call failed with RuntimeError" in logged and "Traceback" in logged
    assert "POST https://api.example/v1?key=" in logged  # the operator sees what failed...
    assert env_canary[:12] not in logged and "Bearer sk" not in logged  # ...but not the key
