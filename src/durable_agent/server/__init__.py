"""The HTTP API and the chat page: sessions, runs and their live streams over HTTP.

Requires the ``server`` extra (FastAPI, uvicorn, sse-starlette). :func:`create_app` builds the
ASGI app; ``durable-agent serve`` runs it (docs/design.md#http-api).
"""

from .app import create_app
from .tenants import Tenant, load_keys

__all__ = ["Tenant", "create_app", "load_keys"]
