"""The dependency closure of the project's extras, read from the installed distributions.

Used to check that the worker image's lock pins everything it installs, and to lay out a fresh
environment holding exactly what ``pip install 'durable-agent[EXTRA]'`` would bring.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata

from packaging.requirements import Requirement

__all__ = ["canonical", "closure", "extras_of"]


def canonical(name: str) -> str:
    """PEP 503 normalised name (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def extras_of(name: str) -> list[str]:
    """The extras distribution ``name`` declares."""
    return list(metadata.distribution(name).metadata.get_all("Provides-Extra") or [])


def closure(name: str, extras: Iterable[str] = ()) -> set[str]:
    """Canonical names of ``name`` and everything it needs with ``extras`` on this platform."""
    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [(name, frozenset(extras))]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        dist_name, wanted = todo.pop()
        key = (canonical(dist_name), wanted)
        if key in done:
            continue
        done.add(key)
        seen.add(canonical(dist_name))
        dist = metadata.distribution(dist_name)
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": extra}) for extra in ("", *wanted)
            ):
                continue
            todo.append((req.name, frozenset(req.extras)))
    return seen
