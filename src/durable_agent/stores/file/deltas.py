"""The live-delta channel of a FileStore: side files next to the session file.

A reply's deltas go to ``<root>/<session_id>.live/<run>.<position>.jsonl``, one JSON line per
delta, appended with ``O_APPEND`` (a reader ignores a last line without its newline: a write in
progress). The file is removed shortly after the reply is stored, and the directory with its last
file, so a session's side files only ever hold the replies being streamed. Store listings glob
``*.jsonl`` in the root only, so they never see these files (docs/design.md#live-deltas).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from pathlib import Path

from pydantic import ValidationError

from ...session.deltas import Cursor, Delta, DeltaKey
from ...session.ids import validate_session_id

__all__ = ["FileDeltas"]

_SAFE = re.compile(r"[A-Za-z0-9_-]{1,64}")


class FileDeltas:
    """Deltas as side files under a FileStore's ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)

    def directory(self, session_id: str) -> Path:
        return self._root / f"{validate_session_id(session_id)}.live"

    def path(self, key: DeltaKey) -> Path:
        run = key.run_id
        if not _SAFE.fullmatch(run):
            run = hashlib.sha256(run.encode("utf-8")).hexdigest()[:32]
        return self.directory(key.session_id) / f"{run}.{key.position}.jsonl"

    async def publish(self, key: DeltaKey, delta: Delta) -> None:
        path = self.path(key)
        line = (delta.model_dump_json() + "\n").encode("utf-8")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    async def read(self, key: DeltaKey, after: Cursor = (0, 0)) -> list[Delta]:
        try:
            data = self.path(key).read_bytes()
        except FileNotFoundError:
            return []
        out: list[Delta] = []
        for line in data.split(b"\n")[:-1]:  # the part after the last newline is unfinished
            try:
                delta = Delta.model_validate_json(line)
            except ValidationError:
                continue  # a torn line: the reader's seq check sees the hole it leaves
            if (delta.attempt, delta.seq) > after:
                out.append(delta)
        return sorted(out, key=lambda d: (d.attempt, d.seq))

    async def clear(self, key: DeltaKey) -> None:
        path = self.path(key)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only when empty: another reply may be streaming

    def size(self, session_id: str) -> int:
        """Bytes of side files held for ``session_id`` (the bench's bound check)."""
        directory = self.directory(session_id)
        if not directory.exists():
            return 0
        return sum(p.stat().st_size for p in directory.iterdir())
