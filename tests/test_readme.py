"""Every ``python`` block of the README runs as written (docs/design.md#handle-and-engine).

A block is a complete script, run in a fresh directory with this interpreter against the suite's
Temporal server (``TEMPORAL_ADDRESS``), or it is marked as a fragment of one that is:
``<!-- fragment of: NAME -->`` on the line before it, ``NAME`` a script marked
``<!-- script: NAME -->``, whose text holds every line of the fragment.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
BLOCK = re.compile(
    r"^(?:<!-- (script|fragment of): ([\w-]+) -->\n)?```python\n(.*?)^```$", re.M | re.S
)

EXPECTED = {
    "quickstart": "['Hello! How can I help?']",
    "quickstart-temporal": "['Hello! How can I help?']",
    "edit-and-retry": "└── ⑂ branch 3/3 (active)",
    "print-tokens": "Tokens arrive as the model writes them.",
    "approvals": "'sent to bob@example.com', 'Sent.'",
}
"""What each named script prints (a line of it)."""


@dataclass(frozen=True)
class Block:
    kind: str  # "script" or "fragment of"
    name: str
    code: str
    line: int


def blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        kind, name, code = match.group(1) or "script", match.group(2) or "", match.group(3)
        line = text.count("\n", 0, match.start(3)) + 1
        found.append(Block(kind, name or f"line-{line}", code, line))
    return found


SCRIPTS = [b for b in blocks() if b.kind == "script"]


def test_the_readme_has_its_quick_starts() -> None:
    names = {b.name for b in SCRIPTS}
    assert {"quickstart", "quickstart-temporal"} <= names
    opened = README.read_text(encoding="utf-8").count("```python")
    assert opened == len(blocks()), "a python block the pattern does not read"


def test_every_fragment_belongs_to_a_script_that_holds_it() -> None:
    scripts = {b.name: b.code for b in SCRIPTS}
    for fragment in (b for b in blocks() if b.kind == "fragment of"):
        script = scripts.get(fragment.name)
        assert script is not None, f"README line {fragment.line}: no script {fragment.name!r}"
        for line in filter(None, (x.strip() for x in fragment.code.splitlines())):
            assert line in script, f"README line {fragment.line}: {line!r} not in {fragment.name}"


@pytest.mark.temporal
@pytest.mark.parametrize("block", SCRIPTS, ids=[b.name for b in SCRIPTS])
def test_every_script_runs_as_written(
    block: Block, temporal_client: Client, tmp_path: Path
) -> None:
    (tmp_path / "script.py").write_text(block.code, encoding="utf-8")
    env = {
        **os.environ,
        "TEMPORAL_ADDRESS": temporal_client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": temporal_client.namespace,
        "PYTHONUNBUFFERED": "1",
    }
    done = subprocess.run(
        [sys.executable, "script.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"README line {block.line}:\n{done.stdout}\n{done.stderr}"
    assert EXPECTED.get(block.name, "") in done.stdout, done.stdout


MISSPELLED = """\
from durable_agent.ai.providers import OpenAIChatModel, OpenAIChatModl
from durable_agent.stores import FileStor, MongoStore
"""
"""Names the lazy modules load on first use, beside misspellings of them: what a user's mypy
must tell apart (a module ``__getattr__`` it sees makes every name an ``Any``)."""


def test_every_script_type_checks_strictly(tmp_path: Path) -> None:
    """As a user's CI checks the code they copy: ``mypy --strict``, no plugin, from a directory
    of their own, so the package's ``py.typed`` and ``__all__`` exports are what it reads; and
    a name the package does not have is an error there, not an ``Any``."""
    for block in SCRIPTS:
        (tmp_path / f"readme_{block.name.replace('-', '_')}.py").write_text(block.code, "utf-8")
    (tmp_path / "misspelled.py").write_text(MISSPELLED, "utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "", "--cache-dir", "mypy"]
        + [p.name for p in sorted(tmp_path.glob("*.py"))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    errors = re.findall(r"^(\S+?):\d+: error: (.*?)(?:;.*)?  \[", done.stdout, re.M)
    assert errors == [
        ("misspelled.py", 'Module "durable_agent.ai.providers" has no attribute "OpenAIChatModl"'),
        ("misspelled.py", 'Module "durable_agent.stores" has no attribute "FileStor"'),
    ], done.stdout + done.stderr


def _cli_paths(group: Any, prefix: str = "") -> list[str]:
    """Every command the typer app registers, in its ``--help`` order (a group, then its
    subcommands: ``sessions``, ``sessions rm``)."""
    paths: list[str] = []
    for name, each in group.commands.items():
        paths.append(f"{prefix}{name}")
        if getattr(each, "commands", None):
            paths += _cli_paths(each, f"{prefix}{name} ")
    return paths


def test_the_cli_section_lists_every_command_in_help_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's command list under "## CLI" names the commands ``durable-agent --help`` does,
    in its order: one that is missing there is one a reader never hears of."""
    import typer

    from durable_agent.cli import command

    monkeypatch.setattr(logging, "lastResort", logging.lastResort)  # command() sets its own
    app: Any = typer.main.get_command(command())
    section = README.read_text(encoding="utf-8").split("\n## CLI\n")[1].split("\n#")[0]
    listed: list[str] = []
    for line in re.findall(r"^    durable-agent ([^#\n]*)", section, re.M):
        words = line.split()
        subcommands = getattr(app.commands.get(words[0]), "commands", None) or {}
        path = " ".join(words[:2]) if words[1:2] and words[1] in subcommands else words[0]
        if not path.startswith("-") and path not in listed:
            listed.append(path)
    assert listed == _cli_paths(app)


def test_the_result_table_names_every_usage_field() -> None:
    """The run result's ``usage`` row names every field of :class:`Usage` (a reasoning model's
    ``reasoning`` tokens were left out of it)."""
    from durable_agent.ai.messages import Usage

    row = re.search(r"^\| `usage` \|(.*)$", README.read_text(encoding="utf-8"), re.M)
    assert row is not None
    assert re.findall(r"`(\w+)`", row.group(1)) == list(Usage.model_fields)
