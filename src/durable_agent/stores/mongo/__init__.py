"""MongoStore: sessions in MongoDB or FerretDB (the ``mongo`` extra; docs/design.md#mongo-store).

Where a turn goes through it: ``append_entries`` (:mod:`.store`) encodes the batch and hands it to
the writer (:mod:`.writer`), which claims its slot and entry IDs (:mod:`.claims`) and inserts one
document; loads turn those documents back into entries (:mod:`.decode`), and a follower's
reads number them up to the first append still in flight (:mod:`.tail`) and, on a replica set,
are woken by a change stream at each append (:mod:`.feed`). A model reply streams
through the store's live-delta channel (:mod:`.deltas`, ``MongoStore.live_deltas()``) while it is
produced, and is stored like any other entry.
"""

try:
    import bson  # noqa: F401
    import pymongo.asynchronous  # noqa: F401
except ImportError as _missing:  # the mongo extra is not installed: say which one to install
    raise ImportError(
        f"MongoStore needs PyMongo ({_missing}): pip install '.[mongo]'",
        name=_missing.name,
    ) from None

from .deltas import MongoDeltas
from .store import DEFAULT_MAX_ENTRY_BYTES, MongoStore

__all__ = ["DEFAULT_MAX_ENTRY_BYTES", "MongoDeltas", "MongoStore"]
