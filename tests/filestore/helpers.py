"""Entries with fixed content and the byte-level helpers the FileStore tests damage files with."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from durable_agent.ai import Message, TextContent
from durable_agent.session import Entry, MessageEntry, encode_entry
from durable_agent.stores import FileStore

__all__ = ["T0", "add_bytes", "fresh_root", "ids", "line", "listing", "msg", "one_entry"]

T0 = datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC)


def msg(entry_id: str, text: str | None = None) -> Entry:
    return MessageEntry(
        id=entry_id,
        created_at=T0,
        message=Message(
            role="user", content=[TextContent(text=text or f"text of {entry_id}")], timestamp=T0
        ),
    )


def line(entry: Entry) -> bytes:
    return encode_entry(entry).encode() + b"\n"


async def one_entry(fs: FileStore, session_id: str = "s1") -> Path:
    """A session holding e1; returns its file."""
    await fs.create_session(session_id)
    await fs.append_entries(session_id, [msg("e1")])
    return fs.root / f"{session_id}.jsonl"


def add_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def listing(path: Path) -> list[str]:
    """Every path under ``path``, relative (sync, so async tests need no blocking Path calls)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def fresh_root(root: Path) -> Path:
    root.mkdir()
    return root


def ids(entries: list[Entry]) -> list[str]:
    return [e.id for e in entries]
