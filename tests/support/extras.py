"""The dependency closure of the project's extras, read from the installed distributions.

Used to check that the worker image's lock pins everything it installs, and to lay out a fresh
environment holding exactly what ``pip install 'durable-agent[EXTRA]'`` would bring.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement

__all__ = ["canonical", "closure", "extras_of", "lay_out"]


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


def _site_files(dist: metadata.Distribution) -> tuple[list[PurePosixPath], list[Path]]:
    """(paths relative to site-packages, absolute paths of its bin/ files) of ``dist``."""
    inside: list[PurePosixPath] = []
    scripts: list[Path] = []
    for file in dist.files or []:
        rel = PurePosixPath(str(file))
        if rel.parts and rel.parts[0] == "..":
            located = Path(str(dist.locate_file(file))).resolve()
            if located.parent.name == "bin":
                scripts.append(located)
            continue
        inside.append(rel)
    return inside, scripts


def lay_out(venv: Path, names: set[str]) -> None:
    """Make ``venv``'s site-packages hold the installed distributions ``names`` and nothing else.

    Symlinks stand in for ``pip install --no-index``: the files are the ones this environment
    installed. A top-level entry (package, module, ``.dist-info``, ``.pth``) owned only by
    distributions in ``names`` is linked whole; one shared with others (a namespace package such
    as ``google``) is rebuilt file by file. Native programs in ``bin/`` (the Temporal CLI) are
    linked; Python scripts are not (their shebang names this environment's interpreter).
    """
    [site] = list((venv / "lib").glob("python3*/site-packages"))
    owners: dict[str, set[str]] = {}
    files: dict[str, tuple[list[PurePosixPath], list[Path]]] = {}
    for dist in metadata.distributions():
        name = canonical(dist.metadata["Name"])
        files.setdefault(name, _site_files(dist))
        for rel in files[name][0]:
            owners.setdefault(rel.parts[0], set()).add(name)
    base = Path(str(metadata.distribution("pydantic").locate_file("")))
    for name in sorted(names):
        inside, scripts = files[name]
        for rel in inside:
            top = rel.parts[0]
            if owners[top] <= names:
                target = site / top
                if not target.exists() and not target.is_symlink():
                    target.symlink_to(base / top)
            else:
                target = site.joinpath(*rel.parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists() and (base / rel).exists():
                    target.symlink_to(base / rel)
        for script in scripts:
            with script.open("rb") as handle:
                if handle.read(2) == b"#!":
                    continue
            link = venv / "bin" / script.name
            if not link.exists():
                link.symlink_to(script)
