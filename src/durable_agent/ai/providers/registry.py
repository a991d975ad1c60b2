"""Model specs (``"openai:gpt-4.1-mini"``) and the registry that turns them into models.

A spec names a provider and a model and nothing else, so it is safe to put in agent options,
workflow inputs and configuration files. Credentials are read from the environment by
:func:`resolve_model` only, when the model client is built, which is the worker's job: the
worker builds model clients and keys from its own configuration, and secrets never enter workflow
data (docs/design.md#temporal).

Built-in providers and the variables they read:

``openai:<model>``
    ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``. With a base URL and no key (a local server) a
    placeholder key is sent, since the SDK insists on one and local servers ignore it.
``anthropic:<model>``
    ``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``.
``ollama:<model>``
    ``OLLAMA_BASE_URL`` (default ``http://localhost:11434/v1``): the OpenAI adapter on Ollama.
``scripted:<name>``
    no credentials: an offline :class:`~durable_agent.ai.scripted.ScriptedModel` that echoes the
    last user message, for demos and smoke tests without a key.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..messages import Message
from ..model import LanguageModel, ModelError, ModelRequest
from ..scripted import Reply, ScriptedModel

__all__ = [
    "LOCAL_PLACEHOLDER_KEY",
    "ModelSpec",
    "ProviderConfigError",
    "ProviderFactory",
    "provider_names",
    "register_provider",
    "resolve_model",
]

LOCAL_PLACEHOLDER_KEY = "not-needed"
"""The API key sent to an OpenAI-compatible server given by URL alone (Ollama, vLLM...)."""

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_OLLAMA_BASE_URL = "http://localhost:11434/v1"
# Passed explicitly so that only ``env`` decides: the SDKs would otherwise consult os.environ.

ProviderFactory = Callable[[str, Mapping[str, str], dict[str, Any]], LanguageModel]
"""``(model, environment, options) -> LanguageModel``; options are adapter keyword arguments."""


class ProviderConfigError(ModelError):
    """A model spec cannot be served: unknown provider, missing SDK extra, or missing credentials.

    A non-retryable :class:`ModelError`, so a worker that resolves models lazily fails the call at
    once instead of retrying a configuration that cannot change. The message names the missing
    variable, never a value.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True)
class ModelSpec:
    """A provider and a model ID, written ``provider:model`` (the model may contain ``:``)."""

    provider: str
    model: str

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        provider, sep, model = spec.partition(":")
        provider, model = provider.strip().lower(), model.strip()
        if not sep or not provider or not model:
            raise ValueError(f"a model spec is 'provider:model', got {spec!r}")
        return cls(provider, model)

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


_PROVIDERS: dict[str, ProviderFactory] = {}


def register_provider(name: str, factory: ProviderFactory, *, replace: bool = False) -> None:
    """Make ``name:<model>`` specs resolve through ``factory``.

    Registering a taken name raises ``ValueError`` unless ``replace`` is true, so two libraries
    cannot silently fight over a provider.
    """
    key = name.strip().lower()
    if not key or ":" in key:
        raise ValueError(f"invalid provider name {name!r}")
    if key in _PROVIDERS and not replace:
        raise ValueError(f"provider {key!r} is already registered")
    _PROVIDERS[key] = factory


def provider_names() -> list[str]:
    """The registered provider names, sorted."""
    return sorted(_PROVIDERS)


def resolve_model(
    spec: str | ModelSpec, *, env: Mapping[str, str] | None = None, **options: Any
) -> LanguageModel:
    """Build the model ``spec`` names, reading credentials from ``env`` (default ``os.environ``).

    ``options`` go to the adapter: ``timeout``, ``provider``, ``options`` (request parameters)...
    Raises :class:`ProviderConfigError` for an unknown provider, a missing SDK or a missing key.
    """
    parsed = spec if isinstance(spec, ModelSpec) else ModelSpec.parse(spec)
    factory = _PROVIDERS.get(parsed.provider)
    if factory is None:
        raise ProviderConfigError(
            f"unknown model provider {parsed.provider!r} in {str(parsed)!r}; "
            f"known: {', '.join(provider_names())}"
        )
    return factory(parsed.model, os.environ if env is None else env, dict(options))


def _import_error(extra: str) -> ProviderConfigError:
    return ProviderConfigError(f"the {extra} provider needs its SDK: pip install '.[{extra}]'")


def _openai(model: str, env: Mapping[str, str], options: dict[str, Any]) -> LanguageModel:
    try:
        from .openai import OpenAIChatModel
    except ImportError:
        raise _import_error("openai") from None
    api_key = env.get("OPENAI_API_KEY") or None
    base_url = env.get("OPENAI_BASE_URL") or None
    if api_key is None:
        if base_url is None:
            raise ProviderConfigError(
                f"openai:{model} needs OPENAI_API_KEY (or OPENAI_BASE_URL for a local server)"
            )
        api_key = LOCAL_PLACEHOLDER_KEY
    base_url = base_url or DEFAULT_OPENAI_BASE_URL
    return OpenAIChatModel(model, api_key=api_key, base_url=base_url, **options)


def _ollama(model: str, env: Mapping[str, str], options: dict[str, Any]) -> LanguageModel:
    try:
        from .openai import OpenAIChatModel
    except ImportError:
        raise _import_error("openai") from None
    base_url = env.get("OLLAMA_BASE_URL") or DEFAULT_OLLAMA_BASE_URL
    options.setdefault("provider", "ollama")
    return OpenAIChatModel(model, api_key=LOCAL_PLACEHOLDER_KEY, base_url=base_url, **options)


def _anthropic(model: str, env: Mapping[str, str], options: dict[str, Any]) -> LanguageModel:
    try:
        from .anthropic import AnthropicModel
    except ImportError:
        raise _import_error("anthropic") from None
    api_key = env.get("ANTHROPIC_API_KEY") or None
    if api_key is None:
        raise ProviderConfigError(f"anthropic:{model} needs ANTHROPIC_API_KEY")
    base_url = env.get("ANTHROPIC_BASE_URL") or DEFAULT_ANTHROPIC_BASE_URL
    return AnthropicModel(model, api_key=api_key, base_url=base_url, **options)


def _echo(request: ModelRequest) -> Reply:
    last: Message | None = next((m for m in reversed(request.messages) if m.role == "user"), None)
    return Reply(text=f"echo: {last.text()}" if last is not None else "echo")


def _scripted(model: str, env: Mapping[str, str], options: dict[str, Any]) -> LanguageModel:
    return ScriptedModel(_echo, model=model, **options)


register_provider("openai", _openai)
register_provider("ollama", _ollama)
register_provider("anthropic", _anthropic)
register_provider("scripted", _scripted)
