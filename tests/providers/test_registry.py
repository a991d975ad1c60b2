"""Model specs and the registry: credentials come from the environment, and only when resolving."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping
from typing import Any

import pytest

from durable_agent.ai import LanguageModel, ModelError, ScriptedModel, user_message
from durable_agent.ai.model import ModelRequest
from durable_agent.ai.providers import (
    LOCAL_PLACEHOLDER_KEY,
    AnthropicModel,
    ModelSpec,
    OpenAIChatModel,
    ProviderConfigError,
    provider_names,
    register_provider,
    resolve_model,
)

from .conftest import collect
from .replay_server import ReplayServer

SECRET = "sk-registry-canary-0123456789"


def test_specs_parse_and_print() -> None:
    assert ModelSpec.parse("openai:gpt-4.1-mini") == ModelSpec("openai", "gpt-4.1-mini")
    assert ModelSpec.parse(" Ollama:qwen3:8b ") == ModelSpec("ollama", "qwen3:8b")
    assert str(ModelSpec("anthropic", "claude-sonnet-4-6")) == "anthropic:claude-sonnet-4-6"


@pytest.mark.parametrize("spec", ["gpt-4.1-mini", ":gpt", "openai:", ""])
def test_malformed_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="provider:model"):
        ModelSpec.parse(spec)


def test_builtin_providers() -> None:
    assert {"anthropic", "ollama", "openai", "scripted"} <= set(provider_names())


def test_unknown_provider_is_a_non_retryable_config_error() -> None:
    with pytest.raises(ProviderConfigError, match="unknown model provider 'nope'") as info:
        resolve_model("nope:model", env={})
    assert isinstance(info.value, ModelError) and not info.value.retryable


@pytest.mark.parametrize(
    ("spec", "variable"),
    [
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
    ],
)
def test_a_missing_key_names_the_variable(spec: str, variable: str) -> None:
    with pytest.raises(ProviderConfigError, match=variable) as info:
        resolve_model(spec, env={"UNRELATED": SECRET})
    assert not info.value.retryable


async def test_openai_reads_key_and_base_url_from_the_given_environment(
    replay: ReplayServer,
) -> None:
    replay.enqueue("openai/text.http")
    env = {"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": f"{replay.url}/v1"}

    model = resolve_model("openai:gpt-4.1-mini", env=env, timeout=5)
    events = await collect(model, ModelRequest(messages=[user_message("hi")]))

    assert isinstance(model, OpenAIChatModel)
    assert SECRET not in repr(model)
    assert replay.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert replay.requests[0].json()["model"] == "gpt-4.1-mini"
    assert events[-1].message.provider == "openai"
    await model.aclose()


async def test_a_local_server_needs_only_a_base_url(replay: ReplayServer) -> None:
    replay.enqueue("openai/text.http")

    model = resolve_model("openai:llama3.2", env={"OPENAI_BASE_URL": f"{replay.url}/v1"})
    await collect(model, ModelRequest(messages=[user_message("hi")]))

    assert replay.requests[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"
    assert isinstance(model, OpenAIChatModel)
    await model.aclose()


async def test_ollama_is_the_openai_adapter_on_its_own_url(replay: ReplayServer) -> None:
    replay.enqueue("openai/text.http")

    model = resolve_model("ollama:qwen3:8b", env={"OLLAMA_BASE_URL": f"{replay.url}/v1"})
    events = await collect(model, ModelRequest(messages=[user_message("hi")]))

    assert replay.requests[0].path == "/v1/chat/completions"
    assert replay.requests[0].json()["model"] == "qwen3:8b"
    assert (events[-1].message.provider, events[-1].message.api) == ("ollama", "openai-chat")
    assert isinstance(model, OpenAIChatModel)
    await model.aclose()


async def test_anthropic_reads_key_and_base_url_from_the_given_environment(
    replay: ReplayServer,
) -> None:
    replay.enqueue("anthropic/text.http")
    env = {"ANTHROPIC_API_KEY": SECRET, "ANTHROPIC_BASE_URL": replay.url}

    model = resolve_model("anthropic:claude-sonnet-4-6", env=env, options={"max_tokens": 256})
    await collect(model, ModelRequest(messages=[user_message("hi")]))

    assert isinstance(model, AnthropicModel)
    assert SECRET not in repr(model)
    assert SECRET in "\n".join(replay.requests[0].headers.values())
    assert replay.requests[0].json()["max_tokens"] == 256
    await model.aclose()


async def test_scripted_echoes_without_credentials() -> None:
    model = resolve_model("scripted:demo", env={})

    events = await collect(model, ModelRequest(messages=[user_message("ping")]))

    assert isinstance(model, ScriptedModel)
    assert (events[-1].message.text(), events[-1].message.model) == ("echo: ping", "demo")


def test_registering_a_taken_name_needs_replace() -> None:
    def factory(model: str, env: Mapping[str, str], options: dict[str, Any]) -> LanguageModel:
        return ScriptedModel([f"{model} {env.get('GREETING', '')}"])

    register_provider("test-custom", factory)
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_provider("test-custom", factory)
        register_provider("test-custom", factory, replace=True)
        model = resolve_model("test-custom:m1", env={"GREETING": "hi"})
        assert isinstance(model, ScriptedModel)
    finally:
        from durable_agent.ai.providers import registry

        registry._PROVIDERS.pop("test-custom", None)
    with pytest.raises(ValueError, match="invalid provider name"):
        register_provider("a:b", factory)


def test_the_package_imports_and_reports_missing_sdks_without_them() -> None:
    """With both SDKs made unimportable, ``durable_agent.ai`` and the registry still import, and
    resolving a provider spec raises a config error naming the extra to install."""
    script = textwrap.dedent(
        """
        import sys
        for name in ("openai", "anthropic"):
            sys.modules[name] = None  # makes "import openai" raise ImportError
        import durable_agent.ai
        from durable_agent.ai.providers import ProviderConfigError, resolve_model
        assert resolve_model("scripted:x", env={}) is not None
        for spec, extra in (("openai:m", "openai"), ("anthropic:m", "anthropic")):
            try:
                resolve_model(spec, env={"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"})
            except ProviderConfigError as exc:
                assert f"pip install '.[{extra}]'" in str(exc), str(exc)
            else:
                raise AssertionError(spec)
        try:
            from durable_agent.ai.providers import OpenAIChatModel
        except ImportError as exc:
            assert "pip install '.[openai]'" in str(exc), str(exc)
        else:
            raise AssertionError("OpenAIChatModel imported without the SDK")
        print("ok")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
