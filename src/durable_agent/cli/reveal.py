"""A streamed reply written to the terminal at the pace it came.

On Temporal a reply's text reaches the client in batches, one per live write of the worker (a
second apart by default, docs/design.md#live-deltas). Printed as they come, a reply jumps a line
at a time; :class:`Reveal` writes each batch out over the time the one before it took to come
(at most ``LONGEST``), so a reply reads as a stream, as on the chat page. Batches that come
less than ``SMOOTH_ABOVE`` apart (an in-process run's tokens) are written at once, and so is
whatever is left when anything else happens (the reply's receipt, a tool, the run's end): the
text is always complete before the line that follows it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

__all__ = ["LONGEST", "SMOOTH_ABOVE", "Reveal"]

TICK = 0.04
"""Seconds between two writes of a batch being revealed."""
LONGEST = 1.0
"""Seconds a batch takes to write out at most."""
SMOOTH_ABOVE = 0.1
"""Batches closer together than this (seconds) are written at once."""
FINISH_EARLY = 0.9
"""A batch is written out within this fraction of the time the last one took: the next one
usually comes as it ends, not after a pause."""


def _loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None  # printed from synchronous code: nothing to pace with


class Reveal:
    """The text of one streaming reply, written through ``write`` (see the module doc)."""

    def __init__(self, write: Callable[[str], None]) -> None:
        self._write = write
        self._text = ""
        self._shown = 0
        self._last: float | None = None
        """Loop time the last batch came."""
        self._pace = (0.0, 0, 1.0)
        """The batch being revealed: when it started, what was shown then, seconds to take."""
        self._timer: asyncio.TimerHandle | None = None

    @property
    def text(self) -> str:
        """The reply so far, shown or not."""
        return self._text

    def add(self, text: str) -> None:
        """The reply so far, extending :attr:`text`: the previous batch is written out at
        once, this one over the time it took to come."""
        self.flush()
        self._text = text
        loop = _loop()
        now = None if loop is None else loop.time()
        took = None if now is None or self._last is None else now - self._last
        self._last = now
        if loop is None or now is None or took is None or took < SMOOTH_ABOVE:
            self.flush()
            return
        self._pace = (now, self._shown, min(took, LONGEST) * FINISH_EARLY)
        self._step(loop)

    def flush(self) -> None:
        """Write out everything received."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._show(len(self._text))

    def reset(self) -> None:
        """Write out what is left and start a new reply."""
        self.flush()
        self._text, self._shown, self._last = "", 0, None

    def _step(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        started, shown, duration = self._pace
        done = min(1.0, (loop.time() - started) / duration)
        self._show(max(shown + math.ceil((len(self._text) - shown) * done), self._shown + 1))
        if self._shown < len(self._text):
            self._timer = loop.call_later(TICK, self._step, loop)

    def _show(self, upto: int) -> None:
        upto = min(upto, len(self._text))
        if upto > self._shown:
            piece, self._shown = self._text[self._shown : upto], upto
            self._write(piece)
