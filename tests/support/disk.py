"""A :class:`FileStore` whose disk can go and come back, for the tests of a store outage."""

from __future__ import annotations

from pathlib import Path

from durable_agent.stores import FileStore

__all__ = ["SwitchedDisk"]


class SwitchedDisk(FileStore):
    """A FileStore whose root is a symlink pointed at a directory (the disk) or at a file (a
    disk gone: every read and write under it fails as a real outage does, not as a missing
    session), switched in one rename. Renaming the directory away and writing a file in its
    place left a moment with no root, in which a reader in another thread (a session's hub)
    found the session deleted."""

    def __init__(self, root: Path) -> None:
        self.root_path = root
        self._disk = root.with_name(f"{root.name}-disk")
        self._gone = root.with_name(f"{root.name}-gone")
        self._disk.mkdir(parents=True)
        self._gone.write_text("not a directory")
        root.symlink_to(self._disk)
        super().__init__(root)

    def down(self) -> None:
        self._point_at(self._gone)

    def up(self) -> None:
        self._point_at(self._disk)

    def _point_at(self, target: Path) -> None:
        link = self.root_path.with_name(f"{self.root_path.name}-new")
        link.symlink_to(target)
        link.replace(self.root_path)
