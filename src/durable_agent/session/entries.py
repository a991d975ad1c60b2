"""Entries: the append-only log's records, and the registry of application custom kinds.

Every entry has a header (``id``, ``parent_id``, ``created_at``); parent pointers are the only tree
structure. A :class:`MessageEntry` carries a message and its visibility flags, a
:class:`CompactionEntry` a summary of what came before, and a :class:`CustomEntry` application data
the model never sees.
"""

from __future__ import annotations

import inspect
import threading
from typing import Annotated, Any, Literal, TypeVar, overload

from pydantic import AliasChoices, AliasPath, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from ..ai.messages import Message
from ..ai.timefmt import UtcDatetime, utc_now
from ..ai.wirefields import EmptyAsNone

__all__ = [
    "RESERVED_WIRE_KEYS",
    "CompactionEntry",
    "CustomEntry",
    "Entry",
    "EntryBase",
    "MessageEntry",
    "custom_class",
    "register_custom",
]

RESERVED_WIRE_KEYS = frozenset({"type", "id", "parent_id", "created_at", "kind"})


class EntryBase(BaseModel):
    """The header every entry carries. The agent overwrites it on every append."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    id: str = ""
    parent_id: Annotated[str | None, EmptyAsNone] = None
    """``""`` reads as ``None``: a root."""
    created_at: UtcDatetime = Field(default_factory=utc_now)


class MessageEntry(EntryBase):
    """A message in the log.

    ``meta``: stored and seen by the model, hidden from the transcript. ``ephemeral``: seen by the
    model for one run, never stored (so it always decodes as false). ``synthetic``: written by the
    library itself, e.g. a repaired tool result.
    """

    type: Literal["message"] = "message"
    message: Message
    meta: bool = False
    ephemeral: bool = False
    synthetic: bool = False


class CompactionEntry(EntryBase):
    """A summary standing in for the path before it; nothing is deleted.

    ``first_kept_id`` names the earliest path entry kept verbatim (``""``: none before the
    compaction); ``tokens_before`` estimates, in tokens, what the model saw before it (kept
    turns included): never negative, docs/design.md#compaction.
    """

    type: Literal["compaction"] = "compaction"
    summary: str
    first_kept_id: str = ""
    tokens_before: int = 0


class CustomEntry(EntryBase):
    """Application data in the log: stored, shown in the transcript, never sent to the model.

    Subclass it and call :func:`register_custom` so stores decode your class. An unregistered kind
    decodes to a bare ``CustomEntry`` keeping its other keys in ``model_extra``.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="allow")

    type: Literal["custom"] = "custom"
    kind: str = ""


Entry = MessageEntry | CompactionEntry | CustomEntry
"""Any entry of the log."""

_registry: dict[str, type[CustomEntry]] = {}
_registry_lock = threading.Lock()

C = TypeVar("C", bound=type[CustomEntry])


def custom_class(kind: str) -> type[CustomEntry] | None:
    """The class registered for ``kind``, if any."""
    return _registry.get(kind)


def _wire_keys(name: str, info: FieldInfo) -> list[str]:
    """Every top-level key a field is written as or read from: name, aliases, alias choices."""
    keys = [name]
    for alias in (info.alias, info.serialization_alias, info.validation_alias):
        if isinstance(alias, str):
            keys.append(alias)
        elif isinstance(alias, AliasPath):
            keys.append(str(alias.path[0]))
        elif isinstance(alias, AliasChoices):
            for choice in alias.choices:
                keys.append(choice if isinstance(choice, str) else str(choice.path[0]))
    return keys


def _check_fields(cls: type[CustomEntry]) -> None:
    base = set(CustomEntry.model_fields)
    # A subclass re-annotating a header field (say ``id: int``) would write entries that no longer
    # decode; only ``kind`` may be redeclared (to give it a default), under its own wire key.
    for klass in cls.__mro__:
        if klass is CustomEntry:
            break
        if not issubclass(klass, CustomEntry):
            continue
        for name in inspect.get_annotations(klass):
            if name in base - {"kind"}:
                raise ValueError(
                    f"custom entry {cls.__name__} redeclares reserved header field {name!r}"
                )
    for name, info in cls.model_fields.items():
        if name in base and name != "kind":
            continue
        for key in _wire_keys(name, info):
            if name == "kind" and key == "kind":
                continue
            if key in RESERVED_WIRE_KEYS:
                raise ValueError(
                    f"custom entry {cls.__name__} field {name!r} uses reserved wire key {key!r}"
                )


def _register(kind: str, cls: C) -> C:
    if not isinstance(kind, str) or not kind:
        raise ValueError("custom entry kind must be a non-empty string")
    if not (isinstance(cls, type) and issubclass(cls, CustomEntry)):
        raise TypeError("register_custom needs a CustomEntry subclass")
    with _registry_lock:
        existing = _registry.get(kind)
        if existing is cls:
            return cls
        if existing is not None:
            raise ValueError(f"custom kind {kind!r} is already registered to {existing.__name__}")
        _check_fields(cls)
        fields = cls.__pydantic_fields__
        fields["kind"] = type(fields["kind"]).from_annotated_attribute(str, kind)
        cls.model_rebuild(force=True)
        _registry[kind] = cls
    return cls


@overload
def register_custom(kind: str) -> Any: ...


@overload
def register_custom(kind: str, cls: C) -> C: ...


def register_custom(kind: str, cls: C | None = None) -> Any:
    """Register a custom entry class for ``kind`` (process-wide); usable as a decorator.

    Makes ``kind`` the class's default ``kind``. ``ValueError`` for an empty kind, a kind taken by
    another class, or a field whose wire key is reserved; re-registering the same class is a no-op.
    """
    if cls is not None:
        return _register(kind, cls)
    if not isinstance(kind, str) or not kind:
        raise ValueError("custom entry kind must be a non-empty string")

    def decorate(target: C) -> C:
        return _register(kind, target)

    return decorate
