"""Every ``docs/design.md#<anchor>`` the code and the README cite names a section that exists:
the comments send readers there instead of to documents outside the repository. The error tree
that document draws is the classes' own."""

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
        *(p for p in sorted((ROOT / "tests").rglob("*.py")) if p != Path(__file__)),
        *sorted((ROOT / "bench").rglob("*.py")),
        ROOT / "README.md",
        ROOT / "docs" / "scaling.md",
        ROOT / "docs" / "design.md",
    ]
    found: dict[str, set[str]] = {}
    for path in files:
        text = path.read_text(encoding="utf-8")
        names = set(CITED.findall(text))
        if path.name == "design.md":  # its own links: "[receipts](#receipts)"
            names.update(re.findall(r"\]\(#([a-z0-9-]+)\)", text))
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
    assert "docs/design.md" in cited["bounded-history"]  # its own "[...](#bounded-history)"
    assert any(f.startswith("tests/") for f in cited["receipts"])


def test_the_readme_links_to_its_own_headings() -> None:
    """A ``(#heading)`` link of the README names one of its headings, as GitHub spells the
    anchor (lower case, punctuation dropped, spaces as hyphens)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    slugs = {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-") for h in headings}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links - slugs == set()


def _error_tree() -> list[tuple[int, str, str]]:
    """(depth, class name, what its parentheses name) of each line of the tree in #errors."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split('<a id="errors"></a>', 1)[1]
    block = section.split("```\nException\n", 1)[1].split("```", 1)[0]
    rows = []
    for line in block.splitlines():
        found = re.match(r"([│ ]*)[├└]── (\w+)(?: \((\w+)\))?", line)
        if found:  # a continuation line of a description has no branch
            rows.append((len(found[1]) // 4 + 1, found[2], found[3] or ""))
    return rows


def test_the_error_tree_draws_every_error_under_its_real_base() -> None:
    """docs/design.md#errors: each class sits under its base (and is the builtin in its
    parentheses), and every error of the three families the package defines is drawn."""
    import builtins

    import durable_agent
    import durable_agent.ai.providers.registry as providers
    import durable_agent.server.runs as server_runs
    import durable_agent.workflows as workflows

    spaces = [durable_agent, workflows, server_runs, providers]

    def cls(name: str) -> type[BaseException]:
        found: type[BaseException] = next(
            getattr(m, name) for m in [*spaces, builtins] if hasattr(m, name)
        )
        return found

    parents: list[type[BaseException]] = [Exception]
    drawn = set()
    for depth, name, also in _error_tree():
        del parents[depth:]
        assert issubclass(cls(name), parents[-1]), (name, parents[-1])
        if also:
            assert issubclass(cls(name), cls(also)), (name, also)
        parents.append(cls(name))
        drawn.add(name)

    def family(base: type[BaseException]) -> set[str]:
        subs = [c for c in base.__subclasses__() if c.__module__.startswith("durable_agent")]
        return {base.__name__}.union(*(family(c) for c in subs))

    roots = (durable_agent.SessionError, durable_agent.AgentError, durable_agent.ModelError)
    assert set().union(*(family(r) for r in roots)) - drawn == set()
