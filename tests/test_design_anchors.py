"""Every ``docs/design.md#<anchor>`` the code and the README cite names a section that exists:
the comments send readers there instead of to documents outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"design\.md#([a-z0-9-]+)")
# a citation may name further sections of the same document: "(docs/design.md#a, #b)"
MORE = re.compile(r"design\.md#[a-z0-9-]+((?:,\s*#[a-z0-9-]+)+)")


def anchors() -> set[str]:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    return set(re.findall(r'<a id="([a-z0-9-]+)"></a>', text))


def citations() -> dict[str, set[str]]:
    """Anchor -> the files citing it."""
    files = [
        *sorted((ROOT / "src").rglob("*.py")),
        ROOT / "README.md",
        ROOT / "docs" / "scaling.md",
    ]
    found: dict[str, set[str]] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        names = set(CITED.findall(text))
        for extra in MORE.findall(text):
            names.update(re.findall(r"#([a-z0-9-]+)", extra))
        for name in names:
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_cited_section_exists() -> None:
    known = anchors()
    missing = {name: sorted(files) for name, files in citations().items() if name not in known}
    assert missing == {}


def test_the_citations_are_found() -> None:
    """The scan sees the code's citations (a broken pattern would pass the test above)."""
    cited = citations()
    assert {"receipts", "http-api", "approvals-and-steering"} <= set(cited)
