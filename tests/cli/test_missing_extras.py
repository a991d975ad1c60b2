"""An install without an extra says which extra to install, for the CLI and each store.

Each case runs a fresh interpreter without ``site`` (so the test venv's packages are not
importable) on a directory holding exactly the packages of one install: the base install's
dependencies only, or everything but PyMongo. The ``durable-agent`` script's entry point is then
called as the console script calls it.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.cli.support import cli_env

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


SCRIPT = (
    "from durable_agent.cli.__main__ import main\nsys.argv = ['durable-agent', *{args!r}]\nmain()"
)


def test_a_base_install_names_the_cli_extra(tmp_path: Path) -> None:
    base = install(tmp_path / "base", list(BASE))
    library = run_isolated(base, "import durable_agent; print('ok')", tmp_path)
    assert library.returncode == 0 and "ok" in library.stdout, library.stderr
    for args in (["--help"], ["sessions"], ["run", "s1", "hi"]):
        result = run_isolated(base, SCRIPT.format(args=args), tmp_path)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: the 'cli' extra of durable-agent is not installed")
        assert "pip install 'durable-agent[cli" in result.stderr


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
    assert "pip install 'durable-agent[mongo]'" in result.stdout


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
    assert "pip install 'durable-agent[mongo]'" in result.stderr.splitlines()[0]
    file_store = run_isolated(
        packages, SCRIPT.format(args=["sessions", "--store", f"file:{tmp_path / 's'}"]), tmp_path
    )
    assert file_store.returncode == 0 and "no sessions" in file_store.stdout, file_store.stderr
