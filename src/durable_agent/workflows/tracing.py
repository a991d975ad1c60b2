"""OpenTelemetry tracing for runs (the ``otel`` extra): one trace per run.

Temporal's interceptor (``temporalio.contrib.opentelemetry``), given to
:func:`~durable_agent.workflows.connect` (workers built from that client inherit it), opens a
span where the client starts a run and carries its context through Temporal headers, so the
run's workflow span and every activity span (``call_model``: the model, ``call_tool``: each
tool, ``load_path`` / ``append_entries``: the store) land in that one trace. Spans go wherever
the OpenTelemetry SDK's exporters send them::

    client = await connect(address, interceptors=[tracing_interceptor()])

This module only builds the interceptor; it imports OpenTelemetry when called, so the rest of the
package imports without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio.client import Interceptor

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

__all__ = ["tracing_interceptor"]


def tracing_interceptor(tracer: Tracer | None = None, **options: Any) -> Interceptor:
    """Temporal's OpenTelemetry interceptor (client and worker), on ``tracer`` or the global
    tracer provider's. Raises ``ImportError`` naming the ``otel`` extra if it is missing."""
    try:
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as exc:
        raise ImportError(
            f"tracing needs the 'otel' extra of durable-agent (no module named {exc.name!r}): "
            "pip install '.[otel]'",
            name=exc.name,
        ) from exc
    return TracingInterceptor(tracer, **options)
