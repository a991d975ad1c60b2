"""Who may do what over HTTP: API keys, each naming a principal and a session-ID prefix.

A keys file maps each key to its tenant, ``{"<key>": {"principal": "ann", "prefix": "acme:"}}``.
Every ``/v1`` route checks the session ID it names against the caller's prefix, and another
tenant's session answers exactly as a missing one (404 ``SessionNotFoundError``), so a caller
cannot even learn that it exists. Keys are compared and forgotten: they never reach the store,
Temporal or a log line (docs/design.md#http-api).
"""

from __future__ import annotations

import hmac
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..session.errors import SessionNotFoundError
from ..session.ids import validate_session_id

__all__ = ["ENV_KEYS", "NO_TENANT", "Tenant", "Tenants", "load_keys"]

logger = logging.getLogger("durable_agent.server")

ENV_KEYS = "DURABLE_AGENT_KEYS"
"""The environment variable naming a keys file when none is given."""


@dataclass(frozen=True)
class Tenant:
    """A caller: its principal (who decided, in approvals) and the session-ID prefix it owns."""

    principal: str
    prefix: str = ""

    def owns(self, session_id: str) -> bool:
        return session_id.startswith(self.prefix)

    def session(self, session_id: str) -> str:
        """``session_id`` validated and checked against the prefix: a foreign ID is a 404."""
        validate_session_id(session_id)
        if not self.owns(session_id):
            raise SessionNotFoundError(session_id)
        return session_id


NO_TENANT = Tenant(principal="local", prefix="")
"""The caller of a server without keys (which binds loopback only)."""


def _tenant(entry: Any) -> Tenant:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("principal"), str):
        raise ValueError('each key maps to {"principal": str, "prefix": str}')
    prefix = entry.get("prefix", "")
    if not isinstance(prefix, str) or (prefix and validate_session_id(prefix) != prefix):
        raise ValueError("a prefix is made of session-ID characters")
    return Tenant(principal=entry["principal"], prefix=prefix)


def load_keys(keys: Mapping[str, Any] | str | Path | None) -> dict[str, Tenant] | None:
    """The key table from a mapping or a JSON file (``None``: the ``DURABLE_AGENT_KEYS`` file
    if set, else no keys). ``ValueError`` names the problem, never a key."""
    if keys is None:
        env = os.environ.get(ENV_KEYS)
        if not env:
            return None
        keys = env
    if isinstance(keys, str | Path):
        try:
            keys = json.loads(Path(keys).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read the keys file {str(keys)!r}: {exc}") from None
    if not isinstance(keys, Mapping):
        raise ValueError("the keys file holds a JSON object of key -> tenant")
    table: dict[str, Tenant] = {}
    for number, (key, entry) in enumerate(keys.items(), 1):
        if not isinstance(key, str) or not key:
            raise ValueError(f"key number {number} is not a non-empty string")
        if len(key.split()) != 1 or key != key.strip():  # never matched: no bearer token has it
            raise ValueError(f"key number {number} has white space, which no bearer token holds")
        try:
            table[key] = _tenant(entry)
        except ValueError as exc:
            raise ValueError(f"key number {number}: {exc}") from None
    _say_overlaps(table)
    return table


def _say_overlaps(table: Mapping[str, Tenant]) -> None:
    """A prefix that begins another's (``acme`` and ``acme2:``) gives its principals the other's
    sessions: a warning at load, by principal, never by key. Nested prefixes may be meant (an
    operator over a team), and no prefix is every session as written: both load."""
    owners: dict[str, list[str]] = {}
    for tenant in table.values():
        names = owners.setdefault(tenant.prefix, [])
        names += [] if tenant.principal in names else [tenant.principal]
    for short, by in owners.items():
        who = ", ".join(by)
        for long, covered in owners.items():
            if short and long != short and long.startswith(short):
                sep = short[-1].isalnum()  # "acme" meant "acme:", more likely than a hierarchy
                hint = f" (end a prefix with a separator, e.g. {short + ':'!r})" if sep else ""
                said = "the prefix %r of %s covers %r of %s: %s can read and run their sessions%s"
                logger.warning(said, short, who, long, ", ".join(covered), who, hint)


class Tenants:
    """The key table of one app; :meth:`caller` turns an ``Authorization`` header into a
    tenant (``None``: no or an unknown key)."""

    def __init__(self, table: dict[str, Tenant] | None) -> None:
        self._table = table

    @property
    def open(self) -> bool:
        """No keys configured: every caller is :data:`NO_TENANT` (loopback only)."""
        return self._table is None

    def caller(self, authorization: str | None) -> Tenant | None:
        if self._table is None:
            return NO_TENANT
        scheme, _, credentials = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":  # an auth scheme's name is case-insensitive (RFC 9110)
            return None
        given = credentials.strip().encode()
        found = None
        for key, tenant in self._table.items():
            # compare with every key, in constant time each: timing tells nothing of the keys
            if hmac.compare_digest(key.encode(), given):
                found = tenant
        return found
