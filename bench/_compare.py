"""Before/after in one run: the same benchmark against another revision of the library.

``--compare REV`` checks ``REV`` out in a throwaway git worktree, runs the *same* benchmark script
in a subprocess with that worktree's ``src`` first on ``PYTHONPATH`` (so the library under test is
REV's, the measuring code is this one's), reads its figures back as JSON and prints them beside
this revision's in one table. The two runs take turns on the same machine, so they see the same
load; each starts its own dev server.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["print_side_by_side", "run_against", "strip_compare"]


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


@contextlib.contextmanager
def worktree(repo: Path, rev: str, keep: bool = False) -> Iterator[tuple[Path, str]]:
    """A detached worktree of ``rev`` (reused if it exists); removed afterwards unless ``keep``."""
    sha = _git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}")
    tree = Path(tempfile.gettempdir()) / f"bench-{sha[:12]}"
    created = not tree.exists()
    if created:
        _git(repo, "worktree", "add", "--detach", str(tree), sha)
    try:
        yield tree, sha
    finally:
        if created and not keep:
            _git(repo, "worktree", "remove", "--force", str(tree))


def strip_compare(argv: Sequence[str]) -> list[str]:
    """``argv`` without ``--before``/``--compare REV`` and ``--json PATH`` (the subprocess gets
    its own)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--before", "--compare", "--json"):
            skip = True
            continue
        if arg.startswith(("--before=", "--compare=", "--json=")):
            continue
        out.append(arg)
    return out


def run_against(script: Path, rev: str, argv: Sequence[str], keep: bool = False) -> dict[str, Any]:
    """Run ``script argv`` with ``rev``'s library; its output streams through, its figures
    come back (with ``revision`` and ``library`` added)."""
    repo = script.resolve().parents[1]
    with worktree(repo, rev, keep) as (tree, sha), tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "before.json"
        env = {**os.environ, "PYTHONPATH": str(tree / "src")}
        print(f"=== before: {rev} ({sha[:12]}), library from {tree / 'src'} ===", flush=True)
        subprocess.run(
            [sys.executable, str(script), *strip_compare(argv), "--json", str(out)],
            env=env,
            check=True,
        )
        figures: dict[str, Any] = json.loads(out.read_text())
    figures["revision"] = f"{rev} ({sha[:12]})"
    return figures


def print_side_by_side(
    rows_before: list[tuple[str, str]], rows_after: list[tuple[str, str]], before: str, after: str
) -> None:
    """One table: each figure's label, its value before and after."""
    after_by_label = dict(rows_after)
    labels = [label for label, _ in rows_before]
    labels += [label for label, _ in rows_after if label not in dict(rows_before)]
    before_by_label = dict(rows_before)
    width = max((len(label) for label in labels), default=10)
    col = max(24, len(before), len(after))
    print(f"\nbefore/after, one run of this script ({before} -> {after}):")
    print(f"  {'figure':<{width}}  {before:>{col}}  {after:>{col}}")
    for label in labels:
        b = before_by_label.get(label, "-")
        a = after_by_label.get(label, "-")
        print(f"  {label:<{width}}  {b:>{col}}  {a:>{col}}")
