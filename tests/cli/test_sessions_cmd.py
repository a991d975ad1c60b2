"""``durable-agent sessions`` (paged, from records) and ``sessions rm`` (asks, or ``--yes``).

Sessions are made with the store API in the test process; the commands run in subprocesses (and
``rm``'s question in a real terminal, pexpect), on a FileStore, with no Temporal needed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pexpect

from durable_agent.ai import ToolCall, assistant_message, user_message
from durable_agent.session import ApprovalDecision, ApprovalRequest, MessageEntry
from durable_agent.stores import FileStore
from tests.cli.support import CLI, cli_env, run_cli


async def make_sessions(root: Path, ids: list[str]) -> FileStore:
    """Sessions created one after another at strictly later times (waiting for the clock)."""
    store = FileStore(root, fsync=False)
    last: datetime | None = None
    for sid in ids:
        while last is not None and datetime.now(UTC) <= last + timedelta(milliseconds=1):
            pass
        last = (await store.create_session(sid)).created_at
    return store


async def test_sessions_lists_newest_first_in_pages(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = await make_sessions(root, [f"s{i}" for i in range(5)])
    await store.append_entries("s1", [MessageEntry(id="e1", message=user_message("hi"))])
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")

    everything = run_cli(["sessions", "--json"], env)
    assert everything.returncode == 0, everything.stderr
    assert [row["id"] for row in json.loads(everything.stdout)] == ["s4", "s3", "s2", "s1", "s0"]

    page = run_cli(["sessions", "--limit", "2", "--offset", "2", "--json"], env)
    assert [row["id"] for row in json.loads(page.stdout)] == ["s2", "s1"]

    table = run_cli(["sessions", "--limit", "2"], env)
    assert table.returncode == 0, table.stderr
    assert table.stdout.index("s4") < table.stdout.index("s3")
    assert "s2" not in table.stdout
    assert "more with --offset 2" in table.stdout
    last = run_cli(["sessions", "--limit", "2", "--offset", "4"], env)
    assert "s0" in last.stdout and "more with" not in last.stdout


async def test_the_listing_names_its_store_as_given_on_one_line(tmp_path: Path) -> None:
    """The title was rich markup wrapped to the table's width: a store at ``x[bold]y`` was
    named ``xy``, and "(newest first)" went onto a line of its own."""
    root = tmp_path / "x[bold]y"
    await make_sessions(root, ["s1"])
    env = {**cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}"), "COLUMNS": "200"}
    listed = run_cli(["sessions"], env)
    assert listed.returncode == 0, listed.stderr
    assert f"sessions in file:{root} (newest first)" in listed.stdout.splitlines()[0], listed.stdout


async def test_sessions_lists_one_prefix(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    await make_sessions(root, ["acme:1", "bolt:1", "acme:2"])
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")
    listed = run_cli(["sessions", "--prefix", "acme:", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == ["acme:2", "acme:1"]
    none = run_cli(["sessions", "--prefix", "cove:"], env)
    assert none.returncode == 0 and "no sessions starting with cove: in" in none.stdout
    bad = run_cli(["sessions", "--prefix", "a/b"], env)
    assert bad.returncode == 2 and "invalid session ID 'a/b'" in bad.stderr, bad.stderr


async def test_sessions_reads_records_not_entries(tmp_path: Path) -> None:
    """A session whose entries no longer decode is still listed: the listing reads records only
    (before, it loaded every entry of every session)."""
    root = tmp_path / "sessions"
    store = await make_sessions(root, ["ok", "damaged"])
    await store.append_entries("damaged", [MessageEntry(id="e1", message=user_message("hi"))])
    with (root / "damaged.jsonl").open("a") as f:
        f.write('{"type": "message", "broken": true}\n')
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")
    listed = run_cli(["sessions", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == ["damaged", "ok"]
    # a file whose header is damaged cannot be listed: the listing says which, as a warning
    (root / "headless.jsonl").write_text("not a header\n")
    listed = run_cli(["sessions", "--json"], env)
    assert listed.returncode == 0, listed.stderr
    assert [row["id"] for row in json.loads(listed.stdout)] == ["damaged", "ok"]
    warning = "warning: not listed: session 'headless': decode session: invalid JSON"
    assert listed.stderr.startswith(warning), listed.stderr
    assert listed.stderr.rstrip().endswith(f"(line 1) in {root / 'headless.jsonl'}")


async def test_sessions_rm_asks_first(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = await make_sessions(root, ["parent", "other"])
    await store.append_entries("parent", [MessageEntry(id="e1", message=user_message("hi"))])
    await store.create_session("child", parent_id="parent")
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")

    def rm_in_terminal(answer: str) -> tuple[int | None, str]:
        child = pexpect.spawn(
            CLI[0], [*CLI[1:], "sessions", "rm", "parent"], env=env, encoding="utf-8", timeout=60
        )
        try:
            child.expect(r"delete session parent and all its entries from file:.*\?")
            child.sendline(answer)
            child.expect(pexpect.EOF)
            out = child.before or ""
        finally:
            child.close()
        return child.exitstatus, out

    code, out = rm_in_terminal("n")
    assert code == 1 and "was not deleted" in out, out
    (kept,) = await store.load_entries("parent")
    assert isinstance(kept, MessageEntry) and kept.message.text() == "hi"

    piped = run_cli(["sessions", "rm", "parent"], env)  # no terminal to ask on: nothing happens
    assert piped.returncode == 1 and "pass --yes" in piped.stderr
    assert (root / "parent.jsonl").exists()

    code, out = rm_in_terminal("y")
    assert code == 0 and "deleted session parent" in out, out
    assert not (root / "parent.jsonl").exists()
    listed = json.loads(run_cli(["sessions", "--json"], env).stdout)
    assert {row["id"]: row["parent_id"] for row in listed} == {"child": "parent", "other": None}

    gone = run_cli(["sessions", "rm", "parent", "--yes"], env)
    assert gone.returncode == 3 and "no session 'parent'" in gone.stderr
    yes = run_cli(["sessions", "rm", "other", "--yes"], env)
    assert yes.returncode == 0 and not (root / "other.jsonl").exists()
    bad = run_cli(["sessions", "rm", "../x", "--yes"], env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


async def test_a_damaged_line_names_its_file_and_line_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "sessions"
    store = await make_sessions(root, ["s1"])
    entries = [MessageEntry(id=f"e{i}", message=user_message(f"m{i}")) for i in range(3)]
    await store.append_entries("s1", entries)
    file = root / "s1.jsonl"
    lines = file.read_bytes().split(b"\n")
    lines[2] = b"{not json" + lines[2]  # the first entry (line 2) stays whole; line 3 is damaged
    file.write_bytes(b"\n".join(lines))
    before = file.read_bytes()
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")
    for args in (["show", "s1"], ["show", "s1", "--json"], ["approvals", "s1", "--json"]):
        result = run_cli(args, env)
        assert result.returncode == 1, result.stderr
        assert result.stdout == ""
        first = result.stderr.splitlines()[0]
        assert first.startswith("error: session 's1': ") and "(line 3)" in first, first
        assert first.endswith(f" in {file}"), first
    assert file.read_bytes() == before


async def test_sessions_rm_deletes_a_session_whose_header_is_damaged(tmp_path: Path) -> None:
    """A file the listing warns about (an empty or torn header) can still be deleted by ID: the
    command is how an operator gets rid of it, and the store deletes it without decoding it."""
    root = tmp_path / "sessions"
    await make_sessions(root, ["other"])
    (root / "empty.jsonl").write_bytes(b"")
    (root / "torn.jsonl").write_bytes(b'{"type":"session_init","id":"torn","created_at":"2026-')
    env = cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}")
    for sid in ("empty", "torn"):
        result = run_cli(["sessions", "rm", sid, "--yes"], env)
        assert result.returncode == 0, result.stderr
        assert f"deleted session {sid}" in result.stdout
        assert not (root / f"{sid}.jsonl").exists()
    # a header naming another session is not this one's file: nothing is deleted
    (root / "alias.jsonl").write_bytes((root / "other.jsonl").read_bytes())
    result = run_cli(["sessions", "rm", "alias", "--yes"], env)
    assert result.returncode == 3, result.stderr
    assert (root / "alias.jsonl").exists()


async def test_the_listing_says_its_times_are_utc(tmp_path: Path) -> None:
    """The created column showed a record's time without its zone: on a machine in another zone
    it read as local time, hours off."""
    root = tmp_path / "sessions"
    store = await make_sessions(root, ["s1"])
    made = (await store.load_session("s1")).created_at
    env = {**cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}"), "COLUMNS": "120"}
    listed = run_cli(["sessions"], env)
    assert listed.returncode == 0, listed.stderr
    assert "created (UTC)" in listed.stdout, listed.stdout
    assert made.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") in listed.stdout, listed.stdout


async def test_show_says_what_a_call_waiting_for_a_person_is_and_who_decided(
    tmp_path: Path,
) -> None:
    """``show`` printed a request for approval, and a decision, as a bare ``custom <kind>``
    heading: which call waited, and what was decided, was only in ``--tree`` or ``--json``."""
    root = tmp_path / "sessions"
    store = await make_sessions(root, ["s1"])
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "ann@example.com"})
    await store.append_entries(
        "s1",
        [
            MessageEntry(id="u1", message=user_message("mail ann")),
            MessageEntry(id="a1", parent_id="u1", message=assistant_message(call)),
            ApprovalRequest(
                id="r1",
                parent_id="a1",
                tool_call_id="call-1",
                tool_name="send_email",
                args={"to": "ann@example.com"},
                run_id="run-1",
            ),
            ApprovalDecision(
                id="d1",
                parent_id="r1",
                tool_call_id="call-1",
                approved=False,
                reason="not today",
            ),
        ],
    )
    env = {**cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}"), "COLUMNS": "120"}
    shown = run_cli(["show", "s1"], env)
    assert shown.returncode == 0, shown.stderr
    assert (
        'send_email({"to": "ann@example.com"})' in shown.stdout.split("approval_request  r1")[1]
    ), shown.stdout
    assert "denied call-1: not today" in shown.stdout.split("approval_decision  d1")[1], (
        shown.stdout
    )


async def test_show_says_a_call_was_approved_with_edited_arguments(tmp_path: Path) -> None:
    """A decision that edited the call's arguments (``approve --args``) showed as ``approved
    call-1``: the arguments the call ran with were only in ``--json``."""
    root = tmp_path / "sessions"
    store = await make_sessions(root, ["s1"])
    call = ToolCall(id="call-1", name="send_email", arguments={"to": "board@example.com"})
    await store.append_entries(
        "s1",
        [
            MessageEntry(id="a1", message=assistant_message(call)),
            ApprovalDecision(
                id="d1",
                parent_id="a1",
                tool_call_id="call-1",
                approved=True,
                args={"to": "cfo@example.com"},
            ),
        ],
    )
    env = {**cli_env(tmp_path, DURABLE_AGENT_STORE=f"file:{root}"), "COLUMNS": "120"}
    edited = 'approved call-1 with edited arguments {"to": "cfo@example.com"}'
    for shown in (run_cli(["show", "s1"], env), run_cli(["show", "s1", "--tree"], env)):
        assert shown.returncode == 0, shown.stderr
        assert edited in shown.stdout, shown.stdout
