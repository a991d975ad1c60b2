"""Generate the secrets docker-compose.yml reads (``make compose-secrets``), once.

MongoDB in the compose file runs with access control: a root user (created on the first start),
an application user the worker connects as (readWrite on ``durable_agent`` only), and the
replica set's internal key. Each comes from a random secret written here, readable by the file's
owner only, so nothing in the repository or the compose file is a usable password. Existing files
are kept (rotating means deleting the directory and the ``mongo-data`` volume).

    python3 deploy/compose_secrets.py [DIR]     # default: .compose

Writes ``mongo.env`` (the mongo service's environment), ``worker.env`` (the worker's store URI)
and ``host.env`` (the same store reached from the host through the loopback port).
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from urllib.parse import quote

DATABASE = "durable_agent"
APP_USER = "durable_agent"
REPLICA_SET = "rs0"
PORT = 27017
FILES = ("mongo.env", "worker.env", "host.env")


def _uri(host: str, user: str, password: str, options: str) -> str:
    return f"mongodb://{quote(user)}:{quote(password)}@{host}:{PORT}/{DATABASE}?{options}"


def render(root_password: str, app_password: str, replica_key: str) -> dict[str, str]:
    """The three env files' text for the given secrets."""
    auth = "authSource=admin"
    return {
        "mongo.env": (
            "MONGO_INITDB_ROOT_USERNAME=root\n"
            f"MONGO_INITDB_ROOT_PASSWORD={root_password}\n"
            f"DURABLE_AGENT_DB_USER={APP_USER}\n"
            f"DURABLE_AGENT_DB_PASSWORD={app_password}\n"
            f"MONGO_REPLICA_KEY={replica_key}\n"
        ),
        "worker.env": "DURABLE_AGENT_STORE="
        + _uri("mongo", APP_USER, app_password, f"replicaSet={REPLICA_SET}&{auth}")
        + "\n",
        "host.env": "DURABLE_AGENT_STORE="
        + _uri("127.0.0.1", APP_USER, app_password, f"directConnection=true&{auth}")
        + "\n",
    }


def write(directory: Path) -> list[Path]:
    """Write the files that are missing (mode 600); return the ones written."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    present = [name for name in FILES if (directory / name).exists()]
    if present == list(FILES):
        return []
    if present:
        # new passwords would not match the users an existing mongo-data volume holds
        raise SystemExit(f"{directory}: only {', '.join(present)} present; delete it to start over")
    # a key of 6 to 1024 base64 characters (mongod's keyFile rule); URL-safe passwords need no
    # quoting in a URI and no escaping in an env file
    files = render(secrets.token_urlsafe(24), secrets.token_urlsafe(24), secrets.token_hex(48))
    written = []
    for name, text in files.items():
        path = directory / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    directory = Path(argv[1] if len(argv) > 1 else ".compose")
    written = write(directory)
    if written:
        print(f"wrote {', '.join(str(p) for p in written)} (mode 600)")
    else:
        print(f"{directory}: secrets already present, kept")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
