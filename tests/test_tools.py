"""Tools: schema derivation, validation, context injection, policy fields, result normalisation."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from durable_agent.ai import (
    ImageContent,
    RetryPolicy,
    TextContent,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
    tool,
)


class SearchArgs(BaseModel):
    """Arguments of the search tool."""

    query: str = Field(description="what to look for")
    limit: int = Field(default=5, ge=1, le=50)
    mode: Literal["web", "news"] = "web"


class Address(BaseModel):
    city: str
    zip: str | None = None


calls: list[Any] = []


@tool
async def add(a: int, b: int = 2) -> str:
    """Add two integers."""
    calls.append(("add", a, b))
    return str(a + b)


@tool
async def search(args: SearchArgs) -> str:
    calls.append(("search", args))
    return f"{args.query}:{args.limit}:{args.mode}"


@tool(name="ship", description="Ship a parcel.", parallel_safe=False, timeout=12.5)
async def ship_parcel(to: Address, items: list[str], express: bool = False) -> ToolResult:
    calls.append(("ship", to, items, express))
    return [TextContent(text=f"{to.city}:{len(items)}:{express}")]


@tool
async def with_ctx(text: str, ctx: ToolContext) -> str:
    await ctx.report(f"working on {text}")
    return f"{ctx.tool_name}/{ctx.tool_call_id}/{text}"


@tool
async def model_and_ctx(args: SearchArgs, ctx: ToolContext) -> str:
    return f"{ctx.tool_call_id}:{args.query}"


@tool
async def picture() -> ToolResult:
    return [TextContent(text="a"), ImageContent(data="AA==", mime_type="image/png")]


@tool
async def untyped(x, y: str = "d"):  # type: ignore[no-untyped-def]
    return f"{x!r}{y}"


def ctx(call_id: str = "call-1", name: str = "t", sink: list[str] | None = None) -> ToolContext:
    async def report(text: str) -> None:
        if sink is not None:
            sink.append(text)

    return ToolContext(tool_call_id=call_id, tool_name=name, report=report)


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


# --- schema -----------------------------------------------------------------------------------


def test_schema_from_type_hints() -> None:
    assert isinstance(add, Tool)
    spec = add.spec
    assert isinstance(spec, ToolSpec)
    assert spec.name == "add"
    assert spec.description == "Add two integers."
    params = spec.parameters
    assert params["type"] == "object"
    assert "title" not in params
    assert set(params["properties"]) == {"a", "b"}
    assert params["properties"]["a"]["type"] == "integer"
    assert params["properties"]["b"]["type"] == "integer"
    assert params["properties"]["b"]["default"] == 2
    assert params["required"] == ["a"]
    assert add.takes_model is False
    assert add.wants_context is False


def test_schema_from_pydantic_model() -> None:
    spec = search.spec
    expected = SearchArgs.model_json_schema()
    expected.pop("title")
    assert spec.parameters == expected
    props = spec.parameters["properties"]
    assert props["query"]["description"] == "what to look for"
    assert props["limit"]["minimum"] == 1
    assert props["limit"]["maximum"] == 50
    assert props["mode"]["enum"] == ["web", "news"]
    assert spec.parameters["required"] == ["query"]
    assert search.takes_model is True
    assert search.args_model is SearchArgs
    # The model's docstring is not the tool's description; the function has none.
    assert search.description == ""


def test_schema_with_nested_model_and_containers() -> None:
    params = ship_parcel.spec.parameters
    assert ship_parcel.name == "ship"
    assert ship_parcel.spec.name == "ship"
    assert ship_parcel.description == "Ship a parcel."
    assert set(params["properties"]) == {"to", "items", "express"}
    assert params["properties"]["items"] == {
        "items": {"type": "string"},
        "title": "Items",
        "type": "array",
    }
    assert "Address" in params["$defs"]
    assert params["$defs"]["Address"]["required"] == ["city"]
    assert sorted(params["required"]) == ["items", "to"]


def test_ctx_parameter_is_not_in_the_schema() -> None:
    assert with_ctx.wants_context is True
    assert set(with_ctx.spec.parameters["properties"]) == {"text"}
    assert model_and_ctx.wants_context is True
    assert model_and_ctx.takes_model is True
    assert "ctx" not in model_and_ctx.spec.parameters["properties"]


def test_no_parameters_gives_empty_object_schema() -> None:
    params = picture.spec.parameters
    assert params["type"] == "object"
    assert params.get("properties", {}) == {}


def test_unannotated_parameter_accepts_anything() -> None:
    assert "type" not in untyped.spec.parameters["properties"]["x"]
    assert untyped.spec.parameters["required"] == ["x"]


def test_sync_handler_is_refused() -> None:
    def sync(x: int) -> str:
        return str(x)

    with pytest.raises(TypeError, match="async"):
        tool(sync)  # type: ignore[arg-type]


def test_explicit_empty_description_is_kept() -> None:
    async def documented(x: int) -> str:
        """Docstring."""
        return ""

    assert tool(description="")(documented).description == ""
    assert tool(documented).description == "Docstring."


# --- invocation ------------------------------------------------------------------------------


async def test_invoke_validates_and_passes_fields() -> None:
    out = await add.invoke({"a": 40}, ctx())
    assert out == [TextContent(text="42")]
    assert calls == [("add", 40, 2)]


async def test_invoke_passes_the_model_itself() -> None:
    out = await search.invoke({"query": "q", "limit": 3}, ctx())
    assert out == [TextContent(text="q:3:web")]
    assert calls == [("search", SearchArgs(query="q", limit=3))]


async def test_invoke_builds_nested_models() -> None:
    out = await ship_parcel.invoke({"to": {"city": "Oslo"}, "items": ["a", "b"]}, ctx())
    assert out == [TextContent(text="Oslo:2:False")]
    assert calls == [("ship", Address(city="Oslo"), ["a", "b"], False)]


@pytest.mark.parametrize(
    ("t", "args"),
    [
        (add, {}),
        (add, {"a": "not a number"}),
        (add, {"a": 1.5}),
        (search, {"limit": 3}),
        (search, {"query": "q", "limit": 0}),
        (search, {"query": "q", "mode": "radio"}),
        (ship_parcel, {"to": {"zip": "1"}, "items": []}),
        (ship_parcel, {"to": {"city": "x"}, "items": "not a list"}),
    ],
)
async def test_invalid_arguments_raise_validation_error_without_calling(
    t: Tool, args: dict[str, Any]
) -> None:
    with pytest.raises(ValidationError):
        await t.invoke(args, ctx())
    assert calls == []


async def test_context_is_injected() -> None:
    reports: list[str] = []
    out = await with_ctx.invoke({"text": "x"}, ctx("call-7", "with_ctx", reports))
    assert out == [TextContent(text="with_ctx/call-7/x")]
    assert reports == ["working on x"]


async def test_context_is_injected_next_to_a_model() -> None:
    out = await model_and_ctx.invoke({"query": "q"}, ctx("call-8"))
    assert out == [TextContent(text="call-8:q")]


async def test_string_result_becomes_one_text_block() -> None:
    assert await add.invoke({"a": 1, "b": 1}, ctx()) == [TextContent(text="2")]


async def test_block_results_are_kept_in_order() -> None:
    out = await picture.invoke({}, ctx())
    assert out == [TextContent(text="a"), ImageContent(data="AA==", mime_type="image/png")]


async def test_empty_string_result_is_one_empty_text_block() -> None:
    @tool
    async def nothing() -> str:
        return ""

    assert await nothing.invoke({}, ctx()) == [TextContent(text="")]


async def test_handler_exceptions_propagate() -> None:
    @tool
    async def broken() -> str:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await broken.invoke({}, ctx())


# --- policy fields ----------------------------------------------------------------------------


def test_defaults() -> None:
    assert add.parallel_safe is True
    assert add.retry == RetryPolicy()
    assert add.timeout == 300.0


def test_parallel_safe_and_timeout_fields() -> None:
    assert ship_parcel.parallel_safe is False
    assert ship_parcel.timeout == 12.5


def test_custom_retry_policy() -> None:
    policy = RetryPolicy(max_attempts=5, initial_interval=0.5, backoff=3, max_interval=4)

    @tool(retry=policy)
    async def flaky() -> str:
        return ""

    assert flaky.retry is policy
    assert [policy.delay(n) for n in (1, 2, 3)] == [0.5, 1.5, 4.0]


def test_retry_policy_defaults_and_delays() -> None:
    p = RetryPolicy()
    assert p.max_attempts == 3
    assert p.delay(1) == 1.0
    assert p.delay(2) == 2.0
    assert p.delay(3) == 4.0
    assert p.delay(10) == 30.0
    assert "ValueError" in p.non_retryable
    assert "ValidationError" in p.non_retryable


@pytest.mark.parametrize(
    "bad",
    [{"max_attempts": 0}, {"initial_interval": -1}, {"backoff": 0.5}, {"max_interval": -1}],
)
def test_retry_policy_rejects_invalid_values(bad: dict[str, float]) -> None:
    with pytest.raises(ValidationError):
        RetryPolicy(**bad)


def test_retry_policy_is_frozen() -> None:
    with pytest.raises(ValidationError):
        RetryPolicy().max_attempts = 9  # type: ignore[misc]
