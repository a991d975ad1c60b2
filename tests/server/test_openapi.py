"""The OpenAPI document (``/openapi.json``) is what a front-end generates its typed client from:
each route's statuses and bodies there are the ones the server really answers, checked here by
sending real requests and matching each answer against what the document declares for it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx

from durable_agent.ai import Reply, ToolCall, tool
from durable_agent.server import create_app
from durable_agent.session.ids import validate_session_id
from durable_agent.stores import FileStore
from durable_agent.workflows import AgentSpec
from tests.server.support import ended, scripted, serving, stream
from tests.support.polling import eventually

KEY = {"Authorization": "Bearer key-acme"}
SID = "acme:doc"


@tool(approval=True)
async def send_email(to: str) -> str:
    """Send an email (a person approves each one)."""
    return f"sent to {to}"


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "number": int | float,
    "boolean": bool,
    "null": type(None),
}


def problems(doc: dict[str, Any], schema: dict[str, Any], value: Any, at: str = "$") -> list[str]:
    """Where ``value`` breaks ``schema`` (the JSON Schema the document's models use)."""
    schema = _resolve(doc, schema)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            tries = [problems(doc, s, value, at) for s in schema[key]]
            return [] if any(not t for t in tries) else [f"{at}: no {key} matches: {tries}"]
    found: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        wanted = TYPES[kind]
        if not isinstance(value, wanted) or (kind == "integer" and isinstance(value, bool)):
            return [f"{at}: {value!r} is not {kind}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{at}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{at}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        found += [f"{at}: {k} missing" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            if k in props:
                found += problems(doc, props[k], v, f"{at}.{k}")
            elif extra is False:
                found.append(f"{at}: {k} is not declared")
            elif isinstance(extra, dict):
                found += problems(doc, extra, v, f"{at}.{k}")
    if isinstance(value, list) and "items" in schema:
        for n, item in enumerate(value):
            found += problems(doc, schema["items"], item, f"{at}[{n}]")
    return found


class Checked:
    """A client whose every answer must be one the document declares for its route."""

    def __init__(self, client: httpx.AsyncClient, doc: dict[str, Any]) -> None:
        self.client, self.doc = client, doc
        self.seen: set[tuple[str, str, int]] = set()

    async def __call__(
        self, method: str, route: str, status: int, headers: Any = KEY, **kw: Any
    ) -> Any:
        path = route.format(**kw.pop("at", {}))
        r = await self.client.request(method, path, headers=headers, **kw)
        assert r.status_code == status, (method, path, r.status_code, r.text)
        operation = self.doc["paths"][route][method]
        declared = operation["responses"].get(str(status))
        assert declared is not None, f"{method} {route}: {status} is not declared"
        self.seen.add((method, route, status))
        if status == 204:
            assert r.content == b"" and "content" not in declared
            return None
        schema = declared["content"]["application/json"]["schema"]
        body = r.json()
        assert problems(self.doc, schema, body) == [], (method, route, status, body)
        return body


def _script() -> list[Reply]:
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "bob@example.com"})
    return [Reply(tool_calls=[call]), Reply(text="Sent."), Reply(text="a summary")]


async def test_every_answer_is_the_one_the_document_declares(tmp_path: Path) -> None:
    spec = AgentSpec(model=scripted(_script()), tools=[send_email])
    keys = {"key-acme": {"principal": "ann", "prefix": "acme:"}}
    app = create_app(store=FileStore(tmp_path / "s"), agents={"helper": spec}, keys=keys)
    doc = app.openapi()
    s = {"session_id": SID}
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        call = Checked(client, doc)
        await call("post", "/v1/sessions", 201, json=s)
        await call("post", "/v1/sessions", 200, json=s)
        await call("get", "/v1/sessions", 200)
        await call("get", "/v1/sessions/{session_id}", 200, at=s)
        async with stream(client, SID, after=0, headers=KEY) as reader:
            body = {"text": "mail bob", "run_id": "r-1"}
            started = await call("post", "/v1/sessions/{session_id}/runs", 202, at=s, json=body)
            run = {**s, "run_id": started["run_id"]}

            async def waiting() -> Any:
                got = await call("get", "/v1/sessions/{session_id}/approvals", 200, at=s)
                return got["pending"]

            await eventually(waiting, what="the call to wait for a decision")
            await call("get", "/v1/sessions/{session_id}/runs", 200, at=s)
            await call("get", "/v1/sessions/{session_id}/runs/{run_id}", 200, at=run)
            msg = {"text": "and cc me"}
            await call("post", "/v1/sessions/{session_id}/messages", 202, at=s, json=msg)
            decide = "/v1/sessions/{session_id}/approvals/{tool_call_id}"
            at = {**s, "tool_call_id": "call-1"}
            await call("post", decide, 200, at=at, json={"approved": True})
            await reader.until(ended(started["run_id"]))
        frames = _stream_schemas(doc)
        assert {"entry", "run"} <= {f.event for f in reader.frames}
        for frame in reader.frames:
            assert problems(doc, frames[frame.event], frame.data) == [], frame
        await call("get", "/v1/sessions/{session_id}/runs/{run_id}", 200, at=run)
        await call("post", "/v1/sessions/{session_id}/runs/{run_id}/cancel", 202, at=run)
        page = await call("get", "/v1/sessions/{session_id}/entries", 200, at=s)
        first = page["entries"][0]["entry"]["id"]
        branch = "/v1/sessions/{session_id}/branch"
        await call("post", branch, 200, at=s, json={"entry_id": first})
        await call("post", "/v1/sessions/{session_id}/fork", 201, at=s, json={})
        await call("post", "/v1/sessions/{session_id}/compact", 200, at=s, json={})
        await _refusals(call, s)
        await call("delete", "/v1/sessions/{session_id}", 204, at=s)
        await call("delete", "/v1/sessions/{session_id}", 404, at=s)


async def _refusals(call: Checked, s: dict[str, str]) -> None:
    """The refusals a client handles come in the project's error body, as declared."""
    runs = "/v1/sessions/{session_id}/runs"
    await call("get", "/v1/sessions", 401, headers={})
    await call("get", "/v1/sessions/{session_id}", 404, at={"session_id": "acme:none"})
    await call("get", "/v1/sessions/{session_id}", 400, at={"session_id": "acme:a b"})
    await call("post", runs, 422, at=s, json={"text": "hi", "run_id": "no spaces"})
    await call("post", runs, 422, at=s, json={})
    await call("get", "/v1/sessions/{session_id}/entries", 422, at=s, params={"limit": 0})
    await call("post", runs, 415, at=s, content=b"text=hi", headers={**KEY, "content-type": "x"})
    await call(
        "post", runs, 400, at=s, content=b"{", headers={**KEY, "content-type": "application/json"}
    )
    await call("post", runs, 413, at=s, json={"text": "x" * 2_000_000})
    await call("post", "/v1/sessions/{session_id}/messages", 409, at=s, json={"text": "hi"})


def _stream_schemas(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each event the stream route declares, by name: the schema of its ``data``."""
    op = doc["paths"]["/v1/sessions/{session_id}/stream"]["get"]
    item = op["responses"]["200"]["content"]["text/event-stream"]["itemSchema"]
    out = {}
    for variant in item["oneOf"]:
        props = variant["properties"]
        out[props["event"]["const"]] = props["data"]["contentSchema"]
    return out


def test_the_stream_declares_its_events() -> None:
    doc = create_app(store=FileStore(Path("/nonexistent"))).openapi()
    assert set(_stream_schemas(doc)) == {"entry", "delta", "run", "deleted"}


def test_errors_are_declared_in_the_projects_shape() -> None:
    """No route claims FastAPI's ``{"detail": [...]}`` 422: the server answers every refusal
    ``{"error": {"type", "message"}}``; each declares the refusals every route can answer."""
    doc = create_app(store=FileStore(Path("/nonexistent"))).openapi()
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status in ("400", "401", "404", "422", "503"):
                content = op["responses"][status]["content"]["application/json"]
                assert content["schema"] == error, (method, path, status)


OPERATIONS = [
    "list_sessions",
    "create_session",
    "get_session",
    "delete_session",
    "get_entries",
    "branch",
    "fork",
    "compact",
    "start_run",
    "active_runs",
    "cancel_run",
    "run_status",
    "stream",
    "send_message",
    "pending",
    "decide",
    "agui",
    "agui_agent",
]


def test_operations_are_named_tagged_and_keyed() -> None:
    """Generated clients name their methods after ``operationId`` and send the key the
    security scheme declares."""
    doc = create_app(store=FileStore(Path("/nonexistent"))).openapi()
    ids = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ids.append(op["operationId"])
            assert re.fullmatch(r"[a-z]+(_[a-z]+)*", op["operationId"]), (method, path)
            assert "v1" not in op["operationId"] and op["tags"], (method, path)
            assert op["security"] == [{"bearer": []}], (method, path)
    assert sorted(ids) == sorted(OPERATIONS)  # a client's method names: renaming breaks it


def test_every_json_answer_names_its_model() -> None:
    """A generated client types an answer only when the document names its model: a bare
    ``object`` or ``{}`` leaves the front-end an untyped dictionary."""
    doc = create_app(store=FileStore(Path("/nonexistent"))).openapi()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, answer in op["responses"].items():
                for media, content in answer.get("content", {}).items():
                    if media == "application/json":
                        assert "$ref" in content["schema"], (method, path, status)
    scheme = doc["components"]["securitySchemes"]["bearer"]
    assert scheme == {"type": "http", "scheme": "bearer"} | {
        k: v for k, v in scheme.items() if k not in ("type", "scheme")
    }


def test_session_ids_are_declared_as_the_server_checks_them() -> None:
    """Every session ID a client sends (path, ``session_id``, ``child_id``) shows the rule the
    server holds it to, so a client can check it before a request answers 400."""
    doc = create_app(store=FileStore(Path("/nonexistent"))).openapi()
    shown: list[dict[str, Any]] = []
    for ops in doc["paths"].values():
        for op in ops.values():
            shown += [p["schema"] for p in op.get("parameters", []) if p["name"] == "session_id"]
    schemas = doc["components"]["schemas"]
    shown.append(schemas["CreateSession"]["properties"]["session_id"])
    shown.append(schemas["Fork"]["properties"]["child_id"])
    assert len(shown) == 16
    for schema in shown:
        pattern = re.compile(schema["pattern"])
        for sid in ["acme:doc", "a" * 200, "u@x.org", "a b", "a/b", "a" * 201, "", "é"]:
            try:
                validate_session_id(sid)
                valid = True
            except ValueError:
                valid = False
            assert bool(pattern.search(sid)) == valid, (schema, sid)
        assert schema["maxLength"] == 200
