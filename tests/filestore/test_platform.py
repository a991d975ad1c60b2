"""Platforms: the package imports where ``fcntl`` does not exist (Windows) and FileStore says
why; on a case-insensitive file system (macOS) two session IDs differing in case stay apart."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from durable_agent.session import SessionNotFoundError
from durable_agent.stores import FileStore
from tests.filestore.helpers import msg

SCRIPT = """
import sys
sys.modules["fcntl"] = None  # as on Windows: import fcntl raises ImportError
import durable_agent, durable_agent.stores
from durable_agent.stores import MemoryStore
MemoryStore()
try:
    durable_agent.stores.FileStore(sys.argv[1])
except NotImplementedError as exc:
    print("refused:", exc)
"""


def test_imports_without_fcntl_and_filestore_refuses_clearly(tmp_path: object) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "refused: FileStore needs POSIX file locks (fcntl)" in done.stdout


async def test_a_session_id_differing_in_case_never_touches_the_other(tmp_path: Path) -> None:
    """On a case-insensitive file system ``ABC.jsonl`` is ``abc.jsonl``; a hard link stands in
    for that here (two names, one file): ``ABC``'s verbs refuse the file ``abc`` wrote."""
    store = FileStore(tmp_path)
    await store.create_session("abc")
    await store.append_entries("abc", [msg("a1", "mine")])
    before = (tmp_path / "abc.jsonl").read_bytes()
    os.link(tmp_path / "abc.jsonl", tmp_path / "ABC.jsonl")
    with pytest.raises(SessionNotFoundError):
        await store.delete_session("ABC")
    assert (tmp_path / "ABC.jsonl").exists(), "the file (abc's) was unlinked"
    # no such session, as on a case-sensitive file system (not a damaged one)
    for verb in (
        lambda: store.load_entries("ABC"),
        lambda: store.load_session("ABC"),
        lambda: store.load_entries_after("ABC", 0),
        lambda: store.append_entries("ABC", [msg("x1", "not yours")]),
        lambda: FileStore(tmp_path).append_entries("ABC", [msg("x1", "not yours")]),
    ):
        with pytest.raises(SessionNotFoundError):
            await verb()
    assert [r.id for r in await store.list_sessions()] == ["abc"]
    assert (tmp_path / "abc.jsonl").read_bytes() == before
    assert [e.id for e in await store.load_entries("abc")] == ["a1"]
