"""Provider adapters and the model-spec registry.

``resolve_model("openai:gpt-4.1-mini")`` builds a :class:`~durable_agent.ai.model.LanguageModel`
with credentials from the environment. The adapters themselves are imported on first use, so this
package imports without the ``openai`` and ``anthropic`` extras installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .registry import (
    LOCAL_PLACEHOLDER_KEY,
    ModelSpec,
    ProviderConfigError,
    ProviderFactory,
    provider_names,
    register_provider,
    resolve_model,
)

if TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .openai import OpenAIChatModel

__all__ = [
    "LOCAL_PLACEHOLDER_KEY",
    "AnthropicModel",
    "ModelSpec",
    "OpenAIChatModel",
    "ProviderConfigError",
    "ProviderFactory",
    "provider_names",
    "register_provider",
    "resolve_model",
]

_LAZY = {"OpenAIChatModel": ".openai", "AnthropicModel": ".anthropic"}


if not TYPE_CHECKING:  # a checker that saw it would take every misspelled name for an Any

    def __getattr__(name: str) -> Any:
        """Import an adapter (and its SDK) only when it is asked for."""
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        from importlib import import_module

        return getattr(import_module(module, __name__), name)
