"""Tree, path, model_view and transcript_view (docs/design.md#tree-and-views)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from durable_agent.ai import Message, TextContent, ToolCall, tool_result_message
from durable_agent.session import (
    INTERRUPTED_TEXT,
    CompactionEntry,
    CustomEntry,
    Entry,
    MessageEntry,
    TreeNode,
    model_view,
    path,
    raw_model_view,
    repair_tool_calls,
    transcript_view,
    tree,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def user(id: str, parent: str | None = None, *, t: float = 0, **flags: bool) -> MessageEntry:
    m = Message(role="user", content=[TextContent(text=id)], timestamp=at(t))
    return MessageEntry(id=id, parent_id=parent, created_at=at(t), message=m, **flags)


def reply(id: str, parent: str | None = None, *, t: float = 0, **flags: bool) -> MessageEntry:
    m = Message(role="assistant", content=[TextContent(text=id)], timestamp=at(t))
    return MessageEntry(id=id, parent_id=parent, created_at=at(t), message=m, **flags)


def compaction(id: str, first_kept: str, *, t: float = 0, summary: str = "") -> CompactionEntry:
    return CompactionEntry(
        id=id, created_at=at(t), summary=summary or f"summary {id}", first_kept_id=first_kept
    )


def custom(id: str, parent: str | None = None, *, t: float = 0) -> CustomEntry:
    return CustomEntry.model_validate(
        {"id": id, "parent_id": parent, "created_at": at(t), "kind": "note", "x": 1}
    )


def shape(nodes: Sequence[TreeNode]) -> list[Any]:
    """Nested [id, [children...]] form of a forest."""
    return [[n.entry.id, shape(n.children)] for n in nodes]


def ids(entries: Sequence[Entry]) -> list[str]:
    return [e.id for e in entries]


def texts(messages: Sequence[Message]) -> list[str]:
    return [m.text() for m in messages]


# --- tree ----------------------------------------------------------------------------------------


def test_tree_spec_example() -> None:
    e1 = user("e1")
    e2 = reply("e2", "e1", t=1)
    e3 = reply("e3", "e1", t=2)
    e4 = user("e4", "e2", t=3)
    forest = tree([e4, e3, e1, e2])
    assert shape(forest) == [["e1", [["e2", [["e4", []]]], ["e3", []]]]]
    assert forest[0].entry is e1
    assert forest[0].children[0].children[0].entry is e4


def test_tree_of_nothing_is_empty() -> None:
    assert tree([]) == []


def test_siblings_sort_by_created_at_stably() -> None:
    root = user("r")
    late = reply("late", "r", t=5)
    tie_a = reply("tie-a", "r", t=2)
    tie_b = reply("tie-b", "r", t=2)
    early = reply("early", "r", t=1)
    forest = tree([root, late, tie_a, tie_b, early])
    assert shape(forest)[0][1] == [["early", []], ["tie-a", []], ["tie-b", []], ["late", []]]
    forest2 = tree([root, late, tie_b, tie_a, early])
    assert shape(forest2)[0][1] == [["early", []], ["tie-b", []], ["tie-a", []], ["late", []]]


def test_roots_are_parentless_or_orphans_sorted_by_created_at() -> None:
    # IDs in reverse alphabetical order of time, so an ID sort would be caught.
    orphan = user("m-orphan", "gone", t=1)
    root = user("a-root", t=2)
    early_orphan = user("z-early", "also-gone", t=0)
    child = reply("child", "m-orphan", t=3)
    assert shape(tree([root, orphan, child, early_orphan])) == [
        ["z-early", []],
        ["m-orphan", [["child", []]]],
        ["a-root", []],
    ]


def test_entries_in_a_cycle_are_omitted_and_the_call_ends() -> None:
    root = user("root")
    a = reply("a", "b", t=1)
    b = reply("b", "a", t=2)
    self_loop = reply("self", "self", t=3)
    kept = reply("kept", "root", t=4)
    assert shape(tree([root, a, b, self_loop, kept])) == [["root", [["kept", []]]]]
    assert tree([a, b]) == []
    assert tree([self_loop]) == []


def test_tree_handles_custom_and_compaction_entries() -> None:
    c = CompactionEntry(id="c", parent_id="u", created_at=at(1), summary="s")
    forest = tree([user("u"), c, custom("n", "c", t=2)])
    assert shape(forest) == [["u", [["c", [["n", []]]]]]]
    assert isinstance(forest[0].children[0].children[0].entry, CustomEntry)


def test_tree_of_a_deep_chain_does_not_hit_the_recursion_limit() -> None:
    chain: list[Entry] = [user("n0")]
    chain += [reply(f"n{i}", f"n{i - 1}", t=i) for i in range(1, 5000)]
    forest = tree(chain)
    node = forest[0]
    depth = 1
    while node.children:
        assert len(node.children) == 1
        node = node.children[0]
        depth += 1
    assert depth == 5000
    assert node.entry.id == "n4999"


# --- path ----------------------------------------------------------------------------------------


def test_path_walks_root_to_leaf() -> None:
    entries = [user("e1"), reply("e2", "e1"), user("e3", "e1"), reply("e4", "e2")]
    assert ids(path(entries, "e4")) == ["e1", "e2", "e4"]
    assert ids(path(entries, "e3")) == ["e1", "e3"]
    assert ids(path(entries, "e1")) == ["e1"]


@pytest.mark.parametrize("leaf", ["", "nope"])
def test_empty_or_unknown_leaf_gives_empty_path(leaf: str) -> None:
    entries = [user("e1"), reply("e2", "e1")]
    assert path(entries, leaf) == []
    assert path({e.id: e for e in entries}, leaf) == []
    assert path([], leaf) == []


def test_path_stops_at_missing_parent() -> None:
    x2 = user("x2", "x1")
    x3 = reply("x3", "x2")
    assert ids(path([x2, x3], "x3")) == ["x2", "x3"]


def test_path_stops_at_repeated_id() -> None:
    c1 = user("c1", "c2")
    c2 = reply("c2", "c1")
    assert ids(path([c1, c2], "c2")) == ["c1", "c2"]
    assert ids(path({"c1": c1, "c2": c2}, "c1")) == ["c2", "c1"]
    loop = user("loop", "loop")
    assert ids(path([loop], "loop")) == ["loop"]


def test_path_over_mapping_returns_the_same_entries() -> None:
    entries = [user("e1"), reply("e2", "e1"), user("e3", "e2")]
    index = {e.id: e for e in entries}
    got = path(index, "e3")
    assert got == entries
    assert all(a is b for a, b in zip(got, entries, strict=True))


class CountingIndex(Mapping[str, Entry]):
    """A mapping that records every lookup, to prove path() only touches the ancestry."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self._data = {e.id: e for e in entries}
        self.lookups = 0

    def __getitem__(self, key: str) -> Entry:
        self.lookups += 1
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.lookups += 1
        return self._data.get(key, default)

    def __iter__(self) -> Any:
        raise AssertionError("path() must not iterate the whole mapping")

    def __len__(self) -> int:
        raise AssertionError("path() must not size the whole mapping")


def test_path_over_mapping_costs_depth_not_size() -> None:
    entries: list[Entry] = [user("root")]
    entries += [reply(f"side{i}", "root", t=i) for i in range(10_000)]
    entries += [user("a", "root"), reply("b", "a"), user("c", "b")]
    index = CountingIndex(entries)
    assert ids(path(index, "c")) == ["root", "a", "b", "c"]
    assert index.lookups <= 5


def test_path_keeps_first_of_duplicate_ids_in_a_sequence() -> None:
    first = user("d")
    second = reply("d")
    assert path([first, second], "d")[0] is first


# --- model_view ------------------------------------------------------------------------------


def test_model_view_without_compaction_emits_every_message_entry() -> None:
    p: list[Entry] = [
        user("u1"),
        custom("note"),
        reply("a1"),
        user("m", meta=True),
        user("eph", ephemeral=True),
        user("both", meta=True, ephemeral=True),
        reply("a2", synthetic=True),
    ]
    view = model_view(p)
    assert texts(view) == ["u1", "a1", "m", "eph", "both", "a2"]
    first = p[0]
    assert isinstance(first, MessageEntry) and view[0] is first.message


def test_model_view_of_empty_path() -> None:
    assert model_view([]) == []


def test_model_view_compaction_example_first_kept() -> None:
    p: list[Entry] = [
        user("u1"),
        reply("a1"),
        user("u2"),
        reply("a2"),
        compaction("C", "u2", t=9),
        user("u3"),
    ]
    view = model_view(p)
    assert texts(view) == ["summary C", "u2", "a2", "u3"]


def test_model_view_compaction_example_missing_first_kept() -> None:
    view = model_view([user("u1"), compaction("C", "missing"), user("u2")])
    assert texts(view) == ["summary C", "u2"]


def test_model_view_compaction_example_two_compactions() -> None:
    p: list[Entry] = [
        user("u1"),
        compaction("C1", "u1"),
        user("u2"),
        compaction("C2", "u2"),
        user("u3"),
    ]
    assert texts(model_view(p)) == ["summary C2", "u2", "u3"]


def test_model_view_empty_first_kept_starts_after_compaction() -> None:
    p: list[Entry] = [user("u1"), reply("a1"), compaction("C", ""), user("u2"), reply("a2")]
    assert texts(model_view(p)) == ["summary C", "u2", "a2"]


def test_first_kept_must_be_before_the_compaction() -> None:
    # u3 is after C: not in 0..c-1, so the view starts at c+1 (u3 once, not twice).
    p: list[Entry] = [user("u1"), compaction("C", "u3"), user("u2"), user("u3")]
    assert texts(model_view(p)) == ["summary C", "u2", "u3"]
    # first_kept naming the compaction itself is not before it either.
    assert texts(model_view([user("u1"), compaction("C", "C"), user("u2")])) == [
        "summary C",
        "u2",
    ]


def test_summary_message_shape() -> None:
    c = compaction("C", "", t=42, summary="what happened")
    view = model_view([user("u1", t=1), c, user("u2", t=50)])
    summary = view[0]
    assert summary.role == "user"
    assert summary.content == [TextContent(text="what happened")]
    assert summary.timestamp == c.created_at
    assert summary.timestamp == at(42)
    assert model_view([user("u1", t=1), c, user("u2", t=50)]) == view


def test_model_view_after_compaction_skips_custom_and_other_compactions() -> None:
    p: list[Entry] = [
        user("u1"),
        custom("n1"),
        compaction("C1", ""),
        reply("a1"),
        custom("n2"),
        user("m", meta=True),
        user("e", ephemeral=True),
        compaction("C2", "a1"),
        custom("n3"),
        user("u2"),
    ]
    assert texts(model_view(p)) == ["summary C2", "a1", "m", "e", "u2"]


def test_model_view_first_kept_may_name_a_custom_entry() -> None:
    # A kept ID naming a custom entry starts there (the custom entry itself is skipped).
    p: list[Entry] = [user("u1"), custom("n"), reply("a1"), compaction("C", "n"), user("u2")]
    assert texts(model_view(p)) == ["summary C", "a1", "u2"]


def test_model_view_output_is_repaired() -> None:
    call = ToolCall(id="call-9", name="echo", arguments={"text": "x"})
    dangling = Message(role="assistant", content=[call], timestamp=at(3))
    p: list[Entry] = [
        user("go"),
        MessageEntry(id="a", created_at=at(3), message=dangling),
        custom("after"),
    ]
    view = model_view(p)
    assert len(view) == 3
    result = view[2]
    assert result.role == "tool_result"
    assert result.tool_call_id == "call-9"
    assert result.tool_name == "echo"
    assert result.is_error is True
    assert result.text() == INTERRUPTED_TEXT
    assert view == repair_tool_calls(raw_model_view(p))
    assert len(raw_model_view(p)) == 2
    p.append(user("next"))
    assert len(model_view(p)) == 4


def test_model_view_repair_applies_after_compaction() -> None:
    call = ToolCall(id="k", name="t")
    kept = MessageEntry(id="a", created_at=at(1), message=Message(role="assistant", content=[call]))
    p: list[Entry] = [user("u1"), kept, compaction("C", "a")]
    view = model_view(p)
    assert [m.role for m in view] == ["user", "assistant", "tool_result"]
    assert view[2].tool_call_id == "k"


def test_model_view_is_deterministic() -> None:
    call = ToolCall(id="c", name="t")
    p: list[Entry] = [
        user("u"),
        MessageEntry(id="a", created_at=at(1), message=Message(role="assistant", content=[call])),
        compaction("C", "u", t=2),
    ]
    first = model_view(p)
    assert model_view(list(p)) == first
    assert [m.model_dump_json() for m in model_view(p)] == [m.model_dump_json() for m in first]


def test_model_view_keeps_complete_tool_exchange_untouched() -> None:
    call = ToolCall(id="c", name="t")
    a = MessageEntry(id="a", created_at=at(1), message=Message(role="assistant", content=[call]))
    r = MessageEntry(
        id="r", created_at=at(2), message=tool_result_message("c", "t", TextContent(text="ok"))
    )
    p: list[Entry] = [user("u"), a, r]
    assert model_view(p) == [e.message for e in p if isinstance(e, MessageEntry)]


# --- transcript_view -----------------------------------------------------------------------------


def test_transcript_view_spec_example() -> None:
    e1 = user("e1")
    e2 = user("e2", meta=True)
    e3 = custom("e3")
    e4 = reply("e4")
    e5 = user("e5", ephemeral=True)
    assert transcript_view([e1, e2, e3, e4, e5]) == [e1, e3, e4]


def test_transcript_view_keeps_compactions_and_does_not_apply_them() -> None:
    p: list[Entry] = [
        user("u1"),
        reply("a1"),
        compaction("C", ""),
        user("both", meta=True, ephemeral=True),
        reply("syn", synthetic=True),
        user("u2"),
    ]
    assert ids(transcript_view(p)) == ["u1", "a1", "C", "syn", "u2"]
    assert transcript_view([]) == []


def test_transcript_view_does_not_repair() -> None:
    dangling = MessageEntry(
        id="a",
        created_at=T0,
        message=Message(role="assistant", content=[ToolCall(id="c", name="t")]),
    )
    assert transcript_view([user("u"), dangling]) == [user("u"), dangling]
