"""The FileStore contract (docs/design.md#file-store) as properties: whatever a crash or a disk
fault does to a session file, a load either fails loudly (CorruptSessionError) or returns what was
written before the damage, and a later append keeps the file readable.

Each example writes a real file, damages it with raw bytes and reads it back through the public API
(a fresh FileStore, as after a restart).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from durable_agent.ai import Message, TextContent
from durable_agent.session import CorruptSessionError, Entry, MessageEntry, encode_entry
from durable_agent.stores import FileStore
from durable_agent.stores.file.lines import is_json_prefix

T = TypeVar("T")
T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for every example (the tests are sync so hypothesis can drive them)."""
    with asyncio.Runner() as r:
        yield r


def msg(entry_id: str, text: str) -> Entry:
    return MessageEntry(
        id=entry_id,
        created_at=T0,
        message=Message(role="user", content=[TextContent(text=text)], timestamp=T0),
    )


def wires(entries: list[Entry]) -> list[str]:
    return [encode_entry(e) for e in entries]


@dataclass(frozen=True)
class Damage:
    kind: str
    data: bytes
    offset: int  # the first byte that may differ from what was written


# Damage that can only remove or blank out data, never forge a different entry.
NO_FORGERY = {"truncate", "truncate+nuls", "overwrite-nuls", "append-garbage", "append-nuls"}
# Damage that only ever leaves a torn tail behind, so the load must succeed.
ALWAYS_TORN = {"truncate", "truncate+nuls", "append-nuls"}


def line_ends(original: bytes) -> list[int]:
    """Offsets just past each line's ``\\n`` (the header first)."""
    ends, pos = [], original.find(b"\n")
    while pos != -1:
        ends.append(pos + 1)
        pos = original.find(b"\n", pos + 1)
    return ends


def position(draw: st.DrawFn, original: bytes) -> int:
    """An offset in ``[0, len(original)]``: a line, then a fraction of it. Drawing a fraction keeps
    the draws independent of the header's length, which varies with its timestamp."""
    ends = line_ends(original)
    i = draw(st.integers(0, len(ends) - 1))
    start = ends[i - 1] if i else 0
    return start + (draw(st.integers(0, 1 << 16)) * (ends[i] - start) >> 16)


@st.composite
def damage(draw: st.DrawFn, original: bytes) -> Damage:
    size = len(original)
    kind = draw(st.sampled_from(sorted(NO_FORGERY | {"overwrite-random"})))
    if kind in ("truncate", "truncate+nuls"):
        cut = position(draw, original)
        pad = b"\x00" * draw(st.integers(1, 1000)) if kind == "truncate+nuls" else b""
        return Damage(kind, original[:cut] + pad, cut)
    if kind in ("overwrite-nuls", "overwrite-random"):
        start = min(position(draw, original), size - 1)
        length = draw(st.integers(1, 64))
        junk = (
            b"\x00" * length
            if kind == "overwrite-nuls"
            else draw(st.binary(min_size=length, max_size=length))
        )
        return Damage(kind, original[:start] + junk + original[start + length :], start)
    if kind == "append-nuls":
        return Damage(kind, original + b"\x00" * draw(st.integers(1, 5000)), size)
    return Damage(kind, original + draw(st.binary(min_size=1, max_size=64)), size)


TEXTS = st.lists(
    st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=0, max_size=30
    ),
    min_size=1,
    max_size=8,
)


@SETTINGS
@given(texts=TEXTS, split=st.integers(0, 8), data=st.data())
def test_damage_never_loses_entries_written_before_it(
    runner: asyncio.Runner, texts: list[str], split: int, data: st.DataObject
) -> None:
    def run(coro: Coroutine[Any, Any, T]) -> T:
        return runner.run(coro)

    entries = [msg(f"e{i}", t) for i, t in enumerate(texts)]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        writer = FileStore(root, fsync=False)
        run(writer.create_session("s"))
        run(writer.append_entries("s", entries[:split]))
        run(writer.append_entries("s", entries[split:]))
        path = root / "s.jsonl"
        original = path.read_bytes()
        hurt = data.draw(damage(original), label="damage")
        path.write_bytes(hurt.data)

        reader = FileStore(root, fsync=False)  # a restarted process: no cached state
        ends = line_ends(original)
        header_end = ends[0]
        intact = sum(1 for end in ends[1:] if end <= hurt.offset)
        try:
            loaded = run(reader.load_entries("s"))
        except CorruptSessionError:
            event(f"{hurt.kind}: corrupt")
            must_load = hurt.kind in ALWAYS_TORN and hurt.offset >= header_end - 1
            assert not must_load, f"{hurt.kind} at {hurt.offset} must leave a loadable file"
            return

        event(f"{hurt.kind}: loaded")
        assert wires(loaded[:intact]) == wires(entries[:intact])
        assert len(loaded) >= intact
        if hurt.kind in NO_FORGERY:
            assert wires(loaded) == wires(entries[: len(loaded)])

        extra = msg("new", "after the damage")
        run(reader.append_entries("s", [extra]))
        reloaded = run(FileStore(root).load_entries("s"))
        assert wires(reloaded) == wires([*loaded, extra])
        assert path.read_bytes().endswith(b"\n")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@SETTINGS
@given(value=JSON, compact=st.booleans(), ascii_only=st.booleans())
def test_every_strict_prefix_of_json_is_torn(value: Any, compact: bool, ascii_only: bool) -> None:
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(value, separators=separators, ensure_ascii=ascii_only)
    if not isinstance(value, (dict, list, str)):
        text = "[" + text + "]"  # a bare number or literal is complete at several prefixes
    assert not is_json_prefix(text)
    for cut in range(len(text)):
        assert is_json_prefix(text[:cut]), text[:cut]
