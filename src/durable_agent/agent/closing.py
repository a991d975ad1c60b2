"""``contextlib.aclosing`` for the loop's nested generators (see :class:`closing`)."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["closing"]

T = TypeVar("T")


class closing(Generic[T]):
    """``contextlib.aclosing`` that also works while the whole chain is being finalized.

    A generator nested in another (``async for`` over it) is closed with its consumer, so an
    abandoned run cancels its tool tasks at once. When the garbage collector finalizes a
    suspended chain (a Temporal workflow evicted mid-run), the inner generator is still
    mid-``await`` (``ag_running``) and is finalized on its own: closing it then would raise
    "already running", so it is left alone. No generator here awaits while closing.
    """

    def __init__(self, agen: AsyncIterator[T]) -> None:
        self.agen = agen

    async def __aenter__(self) -> AsyncIterator[T]:
        return self.agen

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        agen = self.agen
        if isinstance(agen, types.AsyncGeneratorType) and not agen.ag_running:
            await agen.aclose()
