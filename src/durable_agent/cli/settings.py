"""Where the CLI keeps things and which environment variables it reads.

Every variable the worker and the other commands read is named here once, so ``docker-compose.yml``
and its test can be checked against this module rather than against prose.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_TASK_QUEUE",
    "ENV_APP",
    "ENV_DATA_DIR",
    "ENV_MODEL",
    "ENV_MONGODB_DB",
    "ENV_MONGODB_URI",
    "ENV_STORE",
    "ENV_TASK_QUEUE",
    "TEMPORAL_ENV",
    "WORKER_ENV",
    "ServerInfo",
    "data_dir",
    "read_server_info",
    "remove_server_info",
    "temporal_env",
    "write_server_info",
]

ENV_STORE = "DURABLE_AGENT_STORE"
"""``file:PATH`` or a ``mongodb://`` URI; beats ``MONGODB_URI``."""
ENV_MONGODB_URI = "MONGODB_URI"
"""A MongoDB URI, used when ``DURABLE_AGENT_STORE`` is unset."""
ENV_MONGODB_DB = "DURABLE_AGENT_MONGODB_DB"
"""The database name when the URI has none (default ``durable_agent``)."""
ENV_TASK_QUEUE = "DURABLE_AGENT_TASK_QUEUE"
"""The task queue workers poll and clients start runs on (default ``durable-agent``)."""
ENV_APP = "DURABLE_AGENT_APP"
"""The worker's ``--app`` when the flag is not given (handy in containers)."""
ENV_DATA_DIR = "DURABLE_AGENT_DATA_DIR"
"""Overrides the data directory (default ``${XDG_DATA_HOME:-~/.local/share}/durable-agent``)."""
ENV_MODEL = "DURABLE_AGENT_MODEL"
"""The demo app's model spec (``openai:gpt-4.1-mini``...); unset means pick from the API keys."""

TEMPORAL_ENV = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_TLS_CERT",
    "TEMPORAL_TLS_KEY",
    "TEMPORAL_API_KEY",
)
"""What :func:`durable_agent.workflows.connect_from_env` reads."""

WORKER_ENV = frozenset(
    {
        *TEMPORAL_ENV,
        ENV_STORE,
        ENV_MONGODB_URI,
        ENV_MONGODB_DB,
        ENV_TASK_QUEUE,
        ENV_APP,
        ENV_DATA_DIR,
        ENV_MODEL,
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OLLAMA_BASE_URL",
    }
)
"""Every environment variable ``durable-agent worker`` (and the demo app it loads) reads."""

DEFAULT_TASK_QUEUE = "durable-agent"
SERVER_INFO = "server.json"


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user data directory (XDG), created on first use by whoever writes there."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_DATA_DIR)
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "durable-agent"


@dataclass(frozen=True)
class ServerInfo:
    """A dev server some ``durable-agent dev``/``demo`` process is running right now."""

    pid: int
    """The server process."""
    owner_pid: int
    """The ``durable-agent`` process that started it (and will stop it)."""
    address: str
    ui_url: str
    task_queue: str

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def write_server_info(root: Path, info: ServerInfo) -> None:
    """Advertise a running dev server so ``run``/``show``/``chat`` find it without exports."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (SERVER_INFO + ".tmp")
    tmp.write_text(json.dumps(info.__dict__))
    tmp.replace(root / SERVER_INFO)


def read_server_info(root: Path) -> ServerInfo | None:
    """The advertised dev server, if its process is still alive."""
    try:
        raw: dict[str, Any] = json.loads((root / SERVER_INFO).read_text())
        info = ServerInfo(
            pid=int(raw["pid"]),
            owner_pid=int(raw["owner_pid"]),
            address=str(raw["address"]),
            ui_url=str(raw["ui_url"]),
            task_queue=str(raw["task_queue"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.alive() else None


def remove_server_info(root: Path, owner_pid: int) -> None:
    """Withdraw the advertisement, but only our own (a later server may have replaced it)."""
    path = root / SERVER_INFO
    try:
        raw = json.loads(path.read_text())
        if int(raw.get("owner_pid", -1)) == owner_pid:
            path.unlink()
    except (OSError, ValueError, TypeError):
        pass


def temporal_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for ``connect_from_env``: ``TEMPORAL_ADDRESS`` if set, else the address
    of a running ``durable-agent dev`` server, else the SDK default."""
    merged = dict(os.environ if env is None else env)
    if not merged.get("TEMPORAL_ADDRESS"):
        info = read_server_info(data_dir(merged))
        if info is not None:
            merged["TEMPORAL_ADDRESS"] = info.address
    return merged
