"""The HTTP API and the chat page: sessions, runs and their live streams over HTTP.

Requires the ``server`` extra (FastAPI, uvicorn, sse-starlette). :func:`create_app` builds the
ASGI app; ``durable-agent serve`` runs it (docs/design.md#http-api).
"""

try:
    import ag_ui  # noqa: F401
    import fastapi  # noqa: F401
    import sse_starlette  # noqa: F401
    import temporalio  # noqa: F401
except ImportError as _missing:  # the server extra is not installed: say so, not a deep import
    raise ImportError(
        f"durable_agent.server needs the 'server' extra of durable-agent ({_missing}): "
        "pip install '.[server]'",
        name=_missing.name,
    ) from None

from .app import create_app
from .tenants import Tenant, load_keys

__all__ = ["Tenant", "create_app", "load_keys"]
