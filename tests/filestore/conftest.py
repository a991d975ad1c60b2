"""Fixtures of the FileStore tests: a sessions root that does not exist yet, and a store on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from durable_agent.stores import FileStore


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def fs(root: Path) -> FileStore:
    return FileStore(root)
