"""How a FileStore reads every line of a session file: the line-outcome table, header problems,
torn-tail repair on append and the torn-JSON classifier (docs/design.md#file-store).

Files are damaged by writing bytes directly, exactly as a crash or a disk fault would leave them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from durable_agent.session import (
    CorruptSessionError,
    encode_entry,
)
from durable_agent.stores import FileStore
from durable_agent.stores.file.lines import is_json_prefix
from tests.filestore.helpers import add_bytes, fresh_root, ids, line, msg, one_entry

# -- the line-outcome table ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "blank", [b"\n", b"   \n", b"\t \r\n", "\u00a0\u2003\u3000\n".encode(), b"\x0b\x0c\n"]
)
async def test_blank_lines_are_skipped(fs: FileStore, blank: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, blank + blank + line(msg("e2")) + blank)
    assert ids(await fs.load_entries("s1")) == ["e1", "e2"]


@pytest.mark.parametrize(
    ("damage", "lineno"),
    [
        (b"\x00\n", 3),  # NUL is not blank
        (b"\x00" * 10 + b"\n", 3),
        (b'{"type":"message","id":\n', 3),  # a torn write later terminated: damaged
        (b"not json\n", 3),
        (b'{"type":"bogus","id":"x","created_at":"2026-01-01T00:00:00Z"}\n', 3),
        (b'{"type":"message","id":"x","created_at":"yesterday","message":{"role":"user"}}\n', 3),
        (b'{"type":"message","id":"x","created_at":"2026-01-01T00:00:00Z"}\n', 3),
        (b"[1,2]\n", 3),
        (b'{"type":"message","id":"\xff\xfe"}\n', 3),  # not UTF-8
    ],
)
@pytest.mark.parametrize("last", [False, True], ids=["middle", "last"])
async def test_damaged_complete_line_is_corrupt(
    fs: FileStore, damage: bytes, lineno: int, last: bool
) -> None:
    path = await one_entry(fs)
    add_bytes(path, damage if last else damage + line(msg("e2")))
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert "decode entry" in str(info.value)
    assert info.value.line == lineno
    assert info.value.session_id == "s1"


async def test_line_number_counts_blank_lines(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, b"\n\n" + line(msg("e2")) + b"oops\n")
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert info.value.line == 6


CUT_IN_EMOJI = line(msg("e2", "\U0001f30d\U0001f30d")).index("\U0001f30d".encode()) + 6

TORN_TAILS = {
    "905 NULs": b"\x00" * 905,
    "cut after a key": b'{"type":"message","id":"e2","created_at":',
    "partial plus 64 NULs": line(msg("e2"))[:57] + b"\x00" * 64,
    "two newlines": b"\n\n",
    "one byte": b"{",
    "cut mid string": line(msg("e2"))[:-10],
    "cut before the final brace": line(msg("e2"))[:-2],
    "cut in a multibyte character": line(msg("e2", "\U0001f30d\U0001f30d"))[:CUT_IN_EMOJI],
    "cut in an escape": b'{"type":"message","id":"e2","x":"\\u00',
    "cut in a number": b'{"type":"compaction","id":"e2","tokens_before":12',
    "cut in a literal": b'{"type":"message","id":"e2","meta":tr',
    "whitespace only": b"   ",
    "whitespace plus NULs": b"  \x00\x00",
}


@pytest.mark.parametrize("tail", list(TORN_TAILS.values()), ids=list(TORN_TAILS))
async def test_torn_tail_is_dropped(fs: FileStore, tail: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, tail)
    assert ids(await fs.load_entries("s1")) == ["e1"]
    assert (await fs.load_session("s1")).id == "s1"


async def test_cut_inside_a_multibyte_character_really_splits_it() -> None:
    # guards the test above: the cut must land inside the 4-byte emoji sequence
    raw = line(msg("e2", "\U0001f30d\U0001f30d"))[:CUT_IN_EMOJI]
    with pytest.raises(UnicodeDecodeError):
        raw.decode()


async def test_large_torn_tail_is_dropped(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, line(msg("e2", "y" * (512 * 1024)))[:-100])
    assert ids(await fs.load_entries("s1")) == ["e1"]


@pytest.mark.parametrize("padding", [b"", b"\x00" * 30], ids=["bare", "nul-padded"])
async def test_complete_unterminated_entry_is_kept(fs: FileStore, padding: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, line(msg("e2"))[:-1] + padding)
    loaded = await fs.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(msg("e1")), encode_entry(msg("e2"))]


@pytest.mark.parametrize(
    "tail",
    [
        b'{"type":"bogus","id":"x","created_at":"2026-01-01T00:00:00Z"}',
        b"[1,2]",
        b"123",
        b"garbage",
        b'{"type":"message"}}',
        b'{"a":1}\x00\x00{"b"',
        b'{"type":"message","id":"e2\x00x',
        b'{"type":"message","id":"\xff',
    ],
)
async def test_unterminated_line_that_is_not_torn_json_is_corrupt(
    fs: FileStore, tail: bytes
) -> None:
    path = await one_entry(fs)
    add_bytes(path, tail)
    with pytest.raises(CorruptSessionError) as info:
        await fs.load_entries("s1")
    assert "decode entry" in str(info.value)
    assert info.value.line == 3


async def test_a_512_kib_line_loads(fs: FileStore) -> None:
    await fs.create_session("s1")
    big = msg("big", "\u00e9" * (256 * 1024) + "z" * (64 * 1024))
    await fs.append_entries("s1", [big, msg("after")])
    assert len(line(big)) > 512 * 1024
    loaded = await fs.load_entries("s1")
    assert [encode_entry(e) for e in loaded] == [encode_entry(big), encode_entry(msg("after"))]


# -- header problems -------------------------------------------------------------------------------

GOOD_HEADER = b'{"type":"session_init","id":"s1","created_at":"2026-01-01T00:00:00Z"}'
HEADER_PROBLEMS = {
    "empty file": b"",
    "torn header": b'{"type":"session_init","id":"s1',
    "torn header plus NULs": b'{"type":"session_init","id":"s1' + b"\x00" * 40,
    "wrong type": b'{"type":"message","id":"s1","created_at":"2026-01-01T00:00:00Z"}\n',
    "wrong id": b'{"type":"session_init","id":"s2","created_at":"2026-01-01T00:00:00Z"}\n',
    "no created_at": b'{"type":"session_init","id":"s1"}\n',
    "bad created_at": b'{"type":"session_init","id":"s1","created_at":"soon"}\n',
    "not an object": b'["session_init","s1"]\n',
    "blank first line": b"\n" + GOOD_HEADER + b"\n",
    "header then garbage on the same line": GOOD_HEADER + b"x\n",
    "NULs": b"\x00" * 100,
}


@pytest.mark.parametrize("content", list(HEADER_PROBLEMS.values()), ids=list(HEADER_PROBLEMS))
async def test_header_problems_are_corrupt(root: Path, fs: FileStore, content: bytes) -> None:
    path = fresh_root(root) / "s1.jsonl"
    path.write_bytes(content)
    for call in (fs.load_entries, fs.load_session):
        with pytest.raises(CorruptSessionError) as info:
            await call("s1")
        assert "decode session" in str(info.value)
    with pytest.raises(CorruptSessionError):
        await fs.append_entries("s1", [msg("e1")])
    assert path.read_bytes() == content  # an append never "repairs" a header


async def test_unterminated_complete_header_is_fine_and_gets_its_newline(
    root: Path, fs: FileStore
) -> None:
    path = fresh_root(root) / "s1.jsonl"
    header = GOOD_HEADER
    path.write_bytes(header)
    assert await fs.load_entries("s1") == []
    assert (await fs.load_session("s1")).created_at == datetime(2026, 1, 1, tzinfo=UTC)
    await fs.append_entries("s1", [msg("e1")])
    assert path.read_bytes() == header + b"\n" + line(msg("e1"))


# -- torn-tail repair on append --------------------------------------------------------------------


@pytest.mark.parametrize("tail", list(TORN_TAILS.values()), ids=list(TORN_TAILS))
async def test_append_truncates_a_torn_tail(fs: FileStore, tail: bytes) -> None:
    path = await one_entry(fs)
    clean = path.read_bytes()
    add_bytes(path, tail)
    await fs.append_entries("s1", [msg("e3")])
    assert ids(await fs.load_entries("s1")) == ["e1", "e3"]
    kept = tail if tail.endswith(b"\n") else b""  # blank complete lines are not a tail
    assert path.read_bytes() == clean + kept + line(msg("e3"))


@pytest.mark.parametrize("padding", [b"", b"\x00" * 30], ids=["bare", "nul-padded"])
async def test_append_terminates_a_complete_tail(fs: FileStore, padding: bytes) -> None:
    path = await one_entry(fs)
    clean = path.read_bytes()
    add_bytes(path, line(msg("e2"))[:-1] + padding)
    await fs.append_entries("s1", [msg("e2"), msg("e3")])  # e2 is already stored: skipped
    assert path.read_bytes() == clean + line(msg("e2")) + line(msg("e3"))
    assert ids(await fs.load_entries("s1")) == ["e1", "e2", "e3"]


async def test_repair_by_a_store_with_a_warm_cache(fs: FileStore) -> None:
    path = await one_entry(fs)
    await fs.append_entries("s1", [msg("e2")])  # the cache now covers the whole file
    clean = path.read_bytes()
    add_bytes(path, line(msg("torn"))[:40])  # e.g. another process crashed mid-write
    await fs.append_entries("s1", [msg("e3")])
    assert path.read_bytes() == clean + line(msg("e3"))


@pytest.mark.parametrize("tail", [b"garbage", b'{"type":"bogus","id":"x","created_at":"x"}'])
async def test_append_refuses_a_damaged_tail(fs: FileStore, tail: bytes) -> None:
    path = await one_entry(fs)
    add_bytes(path, tail)
    damaged = path.read_bytes()
    with pytest.raises(CorruptSessionError):
        await fs.append_entries("s1", [msg("e2")])
    assert path.read_bytes() == damaged


async def test_append_refuses_a_damaged_complete_line(fs: FileStore) -> None:
    path = await one_entry(fs)
    add_bytes(path, b"not json\n")
    damaged = path.read_bytes()
    with pytest.raises(CorruptSessionError) as info:
        await fs.append_entries("s1", [msg("e2")])
    assert info.value.line == 3
    assert path.read_bytes() == damaged


# -- the torn-JSON classifier ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", " ", "{", '{"a"', '{"a":', '{"a":1', '{"a":1.', '{"a":-', '{"a":1e', '{"a":1e+',
     '{"a":tr', '{"a":nul', '{"a":"x\\u12', '{"a":"x\\', '{"a":[1,2', '{"a":[]', '[{"b":{}',
     '"abc', '{"a":{"b":"c"},'],
)  # fmt: skip
def test_prefixes_of_json(text: str) -> None:
    assert is_json_prefix(text)


@pytest.mark.parametrize(
    "text",
    ['{"a":1}', "{}", '{"a":1}x', "x", '{"a":1,}', "{,", '{"a" 1', "[1,]", "01", '{"a":01',
     '{"a":1.e5', '{"a":"\x01', '{"a":"\\x', '{"a":tx', "]", '{"a":]', '{"a":1]', "[1}"],
)  # fmt: skip
def test_not_prefixes_of_json(text: str) -> None:
    assert not is_json_prefix(text)
