"""Lenient wire fields that JSON decodes natively (docs/design.md#sessions-and-entries).

A few wire fields read more than their type says: ``null`` for an empty list or dict, ``""`` for
no parent, any RFC 3339 time for the canonical one. Python validators do that, and pydantic calls
them for that field of every entry it decodes; a ``before`` validator on JSON input even makes
pydantic build Python objects of the JSON first, to hand them over. Loading a session decodes
every one of its entries, so for JSON input these fields first try a schema pydantic runs
natively, one that accepts only what the encoder writes (a list, a parent ID, a canonical time)
and gives the value the Python validator would give, and take the Python validator for anything
else. What is accepted, and what it reads as, is unchanged; only an invalid JSON value's error
lists both attempts. Python input (objects an application builds) takes the Python validator
alone, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import CoreSchema
from pydantic_core import core_schema as cs

__all__ = ["EmptyAsNone", "JsonNativeFirst", "NullAsEmpty", "json_native_first"]


def json_native_first(native: CoreSchema, python: CoreSchema) -> CoreSchema:
    """JSON input: ``native`` if it accepts the value, else ``python``; Python input:
    ``python``. ``native`` must accept only values ``python`` accepts, and read them alike."""
    return cs.json_or_python_schema(
        json_schema=cs.union_schema([native, python], mode="left_to_right"),
        python_schema=python,
    )


class JsonNativeFirst:
    """Base of an ``Annotated`` marker whose core schema is :func:`json_native_first`'s: its
    JSON Schema is the Python validator's, as the native path accepts nothing more."""

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: GetJsonSchemaHandler) -> Any:
        return handler(schema["python_schema"])


@dataclass(frozen=True)
class NullAsEmpty(JsonNativeFirst):
    """``Annotated`` marker: ``null`` reads as ``empty()`` (``list``, ``dict``, or ``float`` for
    a cost), e.g. a provider's ``"content": null``; JSON holding the value itself is validated
    natively."""

    empty: Callable[[], Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> Any:
        inner = handler(source)
        empty = self.empty

        def null_as_empty(value: Any) -> Any:
            return empty() if value is None else value

        return json_native_first(inner, cs.no_info_before_validator_function(null_as_empty, inner))


def _empty_as_none(value: Any) -> Any:
    return None if value == "" else value


class EmptyAsNone(JsonNativeFirst):
    """``Annotated`` marker of an optional string: ``""`` reads as ``None`` (no parent, say);
    JSON holding ``null`` or a non-empty string is validated natively."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> Any:
        native = cs.nullable_schema(cs.str_schema(min_length=1))
        return json_native_first(
            native, cs.no_info_before_validator_function(_empty_as_none, handler(source))
        )
