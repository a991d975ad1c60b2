"""The Docker build context holds what the Dockerfile copies and nothing else: no virtualenv
(hundreds of MiB), no ``.git``, no ``.compose/`` secrets, no caches or test artifacts.

``.dockerignore`` is read here as Docker reads it (Go ``filepath.Match`` patterns plus ``**``,
``!`` exceptions, the last matching line deciding, a directory's exclusion covering everything
under it) and checked against paths that must stay out and the files the Dockerfile's ``COPY``
lines need.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _regex(pattern: str) -> re.Pattern[str]:
    """A Docker ignore pattern as a regex over ``/``-separated relative paths."""
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if pattern.startswith("/", i):  # "**/" also matches nothing
                out = out[:-2] + "(?:.*/)?"
                i += 1
            continue
        if c == "*":
            out += "[^/]*"
        elif c == "?":
            out += "[^/]"
        elif c == "[":
            end = pattern.index("]", i)
            body = pattern[i + 1 : end]
            out += "[" + ("^" + body[1:] if body.startswith("^") else body) + "]"
            i = end
        elif c == "\\":
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(c)
        i += 1
    return re.compile(out + r"\Z")


def rules() -> list[tuple[bool, re.Pattern[str]]]:
    """``(exception, pattern)`` for every line of ``.dockerignore``, in order."""
    out = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exception = line.startswith("!")
        line = line.removeprefix("!").strip().strip("/")
        out.append((exception, _regex(line)))
    return out


def excluded(path: str) -> bool:
    """Whether Docker leaves ``path`` (relative, ``/``-separated) out of the build context."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for exception, pattern in rules():
        if any(pattern.match(p) for p in prefixes):
            verdict = not exception
    return verdict


MUST_STAY_OUT = [
    ".venv/bin/python",
    ".venv/lib/python3.11/site-packages/pymongo/__init__.py",
    ".venv-peers/bin/python",
    ".git/HEAD",
    ".git/objects/pack/pack-0.pack",
    ".compose/host.env",
    ".compose/mongo-root-password",
    ".pytest_cache/v/cache/lastfailed",
    ".mypy_cache/3.11/durable_agent/__init__.data.json",
    ".ruff_cache/0.8.0/123",
    ".hypothesis/examples/ab/cd",
    "src/durable_agent/__pycache__/__init__.cpython-311.pyc",
    "src/durable_agent.egg-info/PKG-INFO",
    "tests/__pycache__/conftest.cpython-311-pytest-8.3.4.pyc",
    "test-artifacts/junit.xml",
    ".artifacts/run.log",
    "bench/results/load.json",
    "build/lib/durable_agent/__init__.py",
    "dist/durable_agent-0.2.0.tar.gz",
    ".env",
]


@pytest.mark.parametrize("path", MUST_STAY_OUT)
def test_secrets_environments_caches_and_artifacts_stay_out(path: str) -> None:
    assert excluded(path), f"{path} would be sent to the Docker daemon"


def copied_sources() -> list[str]:
    """The local sources of the Dockerfile's ``COPY`` lines (not ``--from`` stages)."""
    sources: list[str] = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.split(maxsplit=1)[:1] != ["COPY"]:
            continue
        words = shlex.split(line, comments=True)
        args = [w for w in words[1:] if not w.startswith("--")]
        assert not any(w.startswith("--from") for w in words), line
        sources += args[:-1]
    return sources


def test_every_file_the_dockerfile_copies_is_sent() -> None:
    sources = copied_sources()
    assert {"pyproject.toml", "README.md", "requirements-dev.txt", "src"} <= set(sources)
    files: list[str] = []
    for source in sources:
        path = ROOT / source
        assert path.exists(), source
        if path.is_dir():
            files += [
                p.relative_to(ROOT).as_posix()
                for p in path.rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
            ]
        else:
            files.append(source)
    assert "src/durable_agent/__init__.py" in files
    assert [f for f in files if excluded(f)] == []


def test_the_matcher_reads_patterns_as_docker_does() -> None:
    """The reader above, on patterns whose meaning Docker documents."""
    assert _regex("*.md").match("README.md") and not _regex("*.md").match("docs/design.md")
    assert _regex("**/*.pyc").match("a.pyc") and _regex("**/*.pyc").match("x/y/a.pyc")
    assert _regex(".venv*").match(".venv-peers") and not _regex(".venv*").match("venv")
    assert _regex("temp?").match("temp1") and not _regex("temp?").match("temp/1")
