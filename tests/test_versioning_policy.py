"""The workflow versioning policy, in code (docs/design.md#versioning).

A run workflow's history replays on whatever worker picks it up, so a change to the commands a
workflow issues for the same history (another activity, another order) breaks the runs in flight.
Temporal's answer is ``workflow.patched``: the old branch stays until no history needs it.

While no release has users, there are no such runs to protect: workflow code carries no
``workflow.patched`` branches, a change ships as it is, and runs started on an older version
finish (or are terminated) before the new workers take over (README, "Upgrading from 0.1").
A release with users is marked by a ``RELEASED`` file at the repository root. From then on, a
change to an existing workflow's command sequence gets a patch, and one minor release later the
patch is retired with ``workflow.deprecate_patch`` (and deleted once no history carries it).
This test holds the first half: it fails on any patch in ``src/`` while ``RELEASED`` is absent.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

PATCH = re.compile(r"workflow\.patched|\bpatched\s*\(|deprecate_patch")


def patches_in_src() -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if PATCH.search(line)
    ]


def test_the_scan_finds_a_patch() -> None:
    assert PATCH.search("if workflow.patched('x'):")
    assert PATCH.search("workflow.deprecate_patch('x')")
    assert not PATCH.search("a dispatched task")


def test_no_workflow_patch_while_no_release_has_users() -> None:
    if (ROOT / "RELEASED").exists():
        return  # patches are how a changed command sequence ships now (see the docstring)
    found = patches_in_src()
    assert found == [], (
        "workflow.patched in src/ while no release has users (no RELEASED file): change the "
        "workflow as it is instead (docs/design.md#versioning):\n" + "\n".join(found)
    )
