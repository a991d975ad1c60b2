"""SPEC §1.2 custom entries and the process-wide registry; §1.5 custom encoding."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, Field, create_model

from durable_agent.ai.timefmt import UtcDatetime
from durable_agent.session import (
    CustomEntry,
    EntryDecodeError,
    custom_class,
    decode_entry,
    edited_args,
    encode_entry,
    register_custom,
)

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
_counter = itertools.count()


def fresh_kind() -> str:
    """A kind no other test registered (the registry is process-wide)."""
    return f"test-custom-{next(_counter)}"


def custom_line(kind: str, **fields: Any) -> str:
    head = {"type": "custom", "id": "x1", "created_at": "2026-01-02T03:04:05Z", "kind": kind}
    return json.dumps({**head, **fields}, ensure_ascii=False, separators=(",", ":"))


# --- registration forms ------------------------------------------------------------------------


def test_decorator_form_registers_and_sets_kind_default() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class Note(CustomEntry):
        text: str = ""

    assert custom_class(kind) is Note
    assert Note(text="a").kind == kind
    assert Note.model_validate({"text": "a"}).kind == kind
    decoded = decode_entry(encode_entry(Note(id="n1", created_at=T0, text="é")))
    assert type(decoded) is Note
    assert decoded == Note(id="n1", created_at=T0, text="é")


def test_call_form_registers_and_returns_the_class() -> None:
    kind = fresh_kind()

    class Mode(CustomEntry):
        mode: str = "plan"

    assert custom_class(kind) is None
    assert Mode().kind == ""
    assert register_custom(kind, Mode) is Mode
    assert custom_class(kind) is Mode
    assert Mode().kind == kind
    decoded = decode_entry(custom_line(kind, mode="act"))
    assert isinstance(decoded, Mode)
    assert decoded.mode == "act"


def test_registering_same_class_again_is_a_no_op() -> None:
    kind = fresh_kind()

    class Once(CustomEntry):
        n: int = 0

    register_custom(kind, Once)
    assert register_custom(kind, Once) is Once
    assert register_custom(kind)(Once) is Once
    assert custom_class(kind) is Once
    assert Once().kind == kind


def test_kind_taken_by_another_class_raises() -> None:
    kind = fresh_kind()

    class First(CustomEntry):
        a: int = 0

    class Second(CustomEntry):
        b: int = 0

    register_custom(kind, First)
    with pytest.raises(ValueError, match="already registered"):
        register_custom(kind, Second)
    with pytest.raises(ValueError):
        register_custom(kind)(Second)
    assert custom_class(kind) is First
    assert Second().kind == ""


@pytest.mark.parametrize("form", ["call", "decorator"])
def test_empty_kind_raises(form: str) -> None:
    class Nameless(CustomEntry):
        a: int = 0

    with pytest.raises(ValueError):
        if form == "call":
            register_custom("", Nameless)
        else:
            register_custom("")(Nameless)
    assert custom_class("") is None


def test_registered_kind_default_can_still_be_overridden() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class Tag(CustomEntry):
        tag: str = ""

    assert Tag(kind="other", tag="t").kind == "other"


def test_redeclared_kind_default_is_replaced_by_registration() -> None:
    kind = fresh_kind()

    class Declared(CustomEntry):
        kind: str = "declared"
        value: int = 0

    register_custom(kind, Declared)
    assert Declared().kind == kind


# --- reserved wire keys ------------------------------------------------------------------------


def _field(**kwargs: Any) -> Any:
    return Field(default="", **kwargs)


@pytest.mark.parametrize("reserved", ["type", "id", "parent_id", "created_at", "kind"])
@pytest.mark.parametrize("how", ["alias", "serialization_alias", "validation_alias"])
def test_field_with_reserved_wire_key_via_alias_raises(reserved: str, how: str) -> None:
    kind = fresh_kind()
    cls = create_model(
        f"Bad_{how}_{reserved}", __base__=CustomEntry, payload=(str, _field(**{how: reserved}))
    )
    with pytest.raises(ValueError, match="reserved"):
        register_custom(kind, cls)
    assert custom_class(kind) is None


@pytest.mark.parametrize(
    "alias",
    [AliasChoices("note", "parent_id"), AliasPath("created_at", 0), AliasChoices(AliasPath("id"))],
)
def test_reserved_key_in_alias_choices_or_path_raises(alias: Any) -> None:
    class Sneaky(CustomEntry):
        payload: str = Field(default="", validation_alias=alias)

    with pytest.raises(ValueError, match="reserved"):
        register_custom(fresh_kind(), Sneaky)


def test_reserved_key_via_alias_generator_raises() -> None:
    class Generated(CustomEntry):
        model_config = ConfigDict(alias_generator=lambda name: "type" if name == "t" else name)
        t: str = ""

    with pytest.raises(ValueError, match="reserved"):
        register_custom(fresh_kind(), Generated)


@pytest.mark.parametrize("header", ["type", "id", "parent_id", "created_at"])
def test_redeclared_header_field_raises(header: str) -> None:
    fields: dict[str, Any] = {header: (Any, None)}
    cls = create_model(f"Redeclares_{header}", __base__=CustomEntry, **fields)
    kind = fresh_kind()
    with pytest.raises(ValueError, match="reserved"):
        register_custom(kind, cls)
    assert custom_class(kind) is None


def test_redeclared_header_field_in_intermediate_class_raises() -> None:
    class Middle(CustomEntry):
        id: str = "fixed"

    class Leaf(Middle):
        x: int = 0

    with pytest.raises(ValueError):
        register_custom(fresh_kind(), Leaf)


def test_harmless_aliases_are_accepted() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class Aliased(CustomEntry):
        count: int = Field(default=0, alias="n")
        label: str = Field(default="", serialization_alias="lbl", validation_alias="lbl")

    e = Aliased(id="a1", created_at=T0, n=3, lbl="x")
    line = encode_entry(e)
    assert json.loads(line) == {
        "type": "custom",
        "id": "a1",
        "created_at": "2026-01-02T03:04:05Z",
        "kind": kind,
        "n": 3,
        "lbl": "x",
    }
    back = decode_entry(line)
    assert back == e
    assert encode_entry(back) == line


# --- encoding and decoding ---------------------------------------------------------------------


class Point(BaseModel):
    x: int
    y: int


def test_registered_class_key_order_nested_fields_and_extras() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class Rich(CustomEntry):
        when: UtcDatetime = T0
        where: Point = Point(x=0, y=0)
        tags: list[str] = Field(default_factory=list)

    line = custom_line(
        kind,
        when="2026-01-02T05:04:05.25+02:00",
        where={"x": 1, "y": 2},
        tags=["a", "é"],
        extra_key={"kept": True},
    )
    e = decode_entry(line)
    assert isinstance(e, Rich)
    assert e.when == T0.replace(microsecond=250000)
    assert e.where == Point(x=1, y=2)
    assert e.model_extra == {"extra_key": {"kept": True}}
    out = encode_entry(e)
    assert list(json.loads(out)) == [
        "type",
        "id",
        "created_at",
        "kind",
        "when",
        "where",
        "tags",
        "extra_key",
    ]
    assert json.loads(out)["when"] == "2026-01-02T03:04:05.25Z"
    assert decode_entry(out) == e
    assert encode_entry(decode_entry(out)) == out


def test_registered_class_failing_validation_raises_decode_error() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class Strict(CustomEntry):
        count: int

    with pytest.raises(EntryDecodeError):
        decode_entry(custom_line(kind, count="many"))
    with pytest.raises(EntryDecodeError):
        decode_entry(custom_line(kind))  # required field missing
    assert decode_entry(custom_line(kind, count=2)) == Strict(id="x1", created_at=T0, count=2)


def test_registered_class_forbidding_extras_fails_on_unknown_key() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class Closed(CustomEntry):
        model_config = ConfigDict(extra="forbid")
        a: int = 0

    with pytest.raises(EntryDecodeError):
        decode_entry(custom_line(kind, a=1, surprise=2))


def test_unregistered_kind_keeps_extras_and_writes_them_back() -> None:
    kind = fresh_kind()
    line = custom_line(kind, b=1, a=[1, {"z": None}], text="ünï", flag=False, n=1.5)
    e = decode_entry(line)
    assert type(e) is CustomEntry
    assert e.kind == kind
    assert e.model_extra == {"b": 1, "a": [1, {"z": None}], "text": "ünï", "flag": False, "n": 1.5}
    assert encode_entry(e) == line


def test_unregistered_kind_with_mongo_like_keys_survives() -> None:
    line = custom_line(fresh_kind(), **{"$set": {"a.b": 1}, "a.b": "$x"})
    assert encode_entry(decode_entry(line)) == line


def test_unregistered_subclass_encodes_fields_then_decodes_bare() -> None:
    class Local(CustomEntry):
        score: int = 0

    e = Local(id="l1", created_at=T0, kind=fresh_kind(), score=7)
    line = encode_entry(e)
    assert json.loads(line)["score"] == 7
    back = decode_entry(line)
    assert type(back) is CustomEntry
    assert back.model_extra == {"score": 7}
    assert encode_entry(back) == line


def test_registry_is_used_only_for_decoding() -> None:
    kind = fresh_kind()
    bare = CustomEntry.model_validate({"id": "b1", "created_at": T0, "kind": kind, "v": 1})
    line = encode_entry(bare)

    @register_custom(kind)
    class Later(CustomEntry):
        v: int = 0

    # The same encoding before and after registration; decoding now yields the class.
    assert encode_entry(bare) == line
    back = decode_entry(line)
    assert type(back) is Later
    assert back.v == 1
    assert encode_entry(back) == line


def test_kind_key_on_wire_wins_over_default() -> None:
    kind = fresh_kind()

    @register_custom(kind)
    class K(CustomEntry):
        pass

    e = decode_entry(custom_line(kind))
    assert type(e) is K
    assert e.kind == kind


def test_empty_kind_round_trips_as_bare_custom() -> None:
    e = CustomEntry(id="c1", created_at=T0)
    line = encode_entry(e)
    assert json.loads(line)["kind"] == ""
    assert decode_entry(line) == e


def test_non_string_kind_raises_decode_error() -> None:
    with pytest.raises(EntryDecodeError):
        decode_entry(custom_line("x").replace('"kind":"x"', '"kind":5'))


def test_custom_header_keys_cannot_be_overridden_by_extras() -> None:
    # A wire object is a dict, so reserved keys appear once and always mean the header.
    e = decode_entry(custom_line(fresh_kind(), other="v"))
    assert (e.id, e.parent_id, e.created_at) == ("x1", None, T0)
    assert e.model_extra == {"other": "v"}


def test_edited_args_change_the_fields_given_and_keep_the_rest() -> None:
    """What a front end that lets a person change some of a call's arguments sends as the
    decision's ``args`` (which replace the call's whole)."""
    asked = {"to": "team@example.com", "subject": "Q3", "cc": None}
    assert edited_args(asked, {"to": "cfo@example.com"}) == {
        "to": "cfo@example.com",
        "subject": "Q3",
        "cc": None,
    }
    assert edited_args(asked, {"bcc": "me"}) == {**asked, "bcc": "me"}  # a field added
    assert edited_args(asked, {"cc": "x", "subject": ""}) == {
        "to": "team@example.com",
        "subject": "",
        "cc": "x",
    }
    # a change that changes nothing is no edit: the call runs as the model asked
    assert edited_args(asked, {}) is None
    assert edited_args(asked, {"subject": "Q3"}) is None
    assert asked == {"to": "team@example.com", "subject": "Q3", "cc": None}  # not modified
