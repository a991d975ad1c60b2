"""`approvals`, `approve` and `deny` from a shell against a running demo worker: a run waiting
for a decision gets it through its ``decide`` update (docs/design.md#approvals-and-steering)."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pexpect
import pytest

from durable_agent import ApprovalRequest, MessageEntry
from durable_agent.ai import ToolCall
from durable_agent.ai.messages import assistant_message, user_message
from durable_agent.cli.run import CANCEL_WAIT
from durable_agent.stores import FileStore
from tests.cli.support import CLI, Dev, cli_env, run_cli, running_dev, worker_process
from tests.support.polling import wait_until

pytestmark = pytest.mark.temporal

OPS_APP = Path(__file__).resolve().parents[1] / "support" / "ops_app.py"
TIMEOUT = 2.0
"""``run --timeout`` in the tests of its clock: short, as they wait past it."""


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with running_dev(tmp_path_factory.mktemp("dev-home")) as running:
        yield running


def _pending(env: dict[str, str], session: str) -> list[dict[str, object]]:
    listed = run_cli(["approvals", session, "--json"], env)
    if listed.returncode == 3:
        return []  # the run has not created the session yet
    assert listed.returncode == 0, listed.stderr
    items: list[dict[str, object]] = json.loads(listed.stdout)
    return items


def _waiting_run(
    env: dict[str, str], session: str, text: str, *args: str
) -> tuple[subprocess.Popen[str], str]:
    """Start ``run`` in the background; return it and the call it waits on."""
    proc = subprocess.Popen(
        [*CLI, "run", session, text, "--json", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    items = wait_until(lambda: _pending(env, session), within=60, what="a pending call")
    return proc, str(items[0]["tool_call_id"])


def test_approve_and_deny_from_a_shell(dev: Dev) -> None:
    proc, call = _waiting_run(dev.env, "mail1", "Email the Q3 figures to the team.")
    assert _pending(dev.env, "mail1")[0]["tool_name"] == "send_email"
    decided = run_cli(["approve", "mail1", call, "--by", "ops"], dev.env)
    assert decided.returncode == 0, decided.stderr
    assert f"approved {call}" in decided.stdout
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "email to team@example.com sent" in json.dumps(json.loads(out))
    # the waiting run said how to decide, on stderr (stdout stays JSON)
    assert f"decide: durable-agent approve|deny mail1 {call}" in " ".join(err.split()), err
    again = run_cli(["deny", "mail1", call], dev.env)
    assert again.returncode == 3  # nothing pending any more
    assert _pending(dev.env, "mail1") == []

    proc, call = _waiting_run(dev.env, "mail2", "Email the Q3 figures to the board.")
    denied = run_cli(["deny", "mail2", call, "--reason", "not before the audit"], dev.env)
    assert denied.returncode == 0, denied.stderr
    out, _ = proc.communicate(timeout=60)
    assert "tool call denied: not before the audit" in out


def test_approve_with_edited_args_says_what_the_call_runs_with(dev: Dev) -> None:
    """``approve --args`` said ``approved call-1``, as if the call ran as the model asked."""
    proc, call = _waiting_run(dev.env, "mail4", "Email the Q3 figures to the board.")
    edited = {"to": "cfo@example.com", "subject": "Q3"}
    decided = run_cli(["approve", "mail4", call, "--args", json.dumps(edited)], dev.env)
    assert decided.returncode == 0, decided.stderr
    said = f"approved {call} with edited arguments {json.dumps(edited)}"
    assert said in " ".join(decided.stdout.split()), decided.stdout
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "email to cfo@example.com sent: Q3" in out


def test_approve_args_change_only_the_fields_given(dev: Dev) -> None:
    """``approve --args '{"to": …}'`` ran the call with those arguments alone: the model's
    subject gone, the demo's ``send_email`` failed on it and sent nothing. The fields given
    change, the model's others are kept, and the decision says what the call runs with."""
    proc, call = _waiting_run(dev.env, "mail6", "Email the Q3 figures to the board.")
    asked = _pending(dev.env, "mail6")[0]["args"]
    assert isinstance(asked, dict) and set(asked) == {"to", "subject"}
    decided = run_cli(["approve", "mail6", call, "--args", '{"to": "cfo@example.com"}'], dev.env)
    assert decided.returncode == 0, decided.stderr
    ran = json.dumps({**asked, "to": "cfo@example.com"})[:40]  # the line is cut to one
    said = f"approved {call} with edited arguments {ran}"
    assert said in " ".join(decided.stdout.split()), decided.stdout
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"email to cfo@example.com sent: {asked['subject']}" in out, out


def _outlives(proc: subprocess.Popen[str], seconds: float) -> None:
    """Let ``seconds`` pass, the time being what is tested, unless ``proc`` ends first: it
    must not."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(seconds)
    if proc.returncode is not None:
        raise AssertionError(f"`run` exited {proc.returncode}: {proc.communicate()}")


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """``proc`` for the block, killed after it if a failure left it running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_run_timeout_does_not_count_the_wait_for_a_person(dev: Dev) -> None:
    """``run --timeout`` bounds the agent's work, not the time a person takes to decide: a run
    whose call waited past it for its approval goes on once approved (it was cancelled at the
    timeout, exit 1, "the run did not finish in 2 s", while the call still waited)."""
    text = "Email the Q3 figures to the team."
    proc, call = _waiting_run(dev.env, "mail6", text, "--timeout", f"{TIMEOUT:g}")
    with _reaped(proc):
        _outlives(proc, TIMEOUT + 1.0)  # its clock started before the request was stored
        decided = run_cli(["approve", "mail6", call], dev.env)
        assert decided.returncode == 0, decided.stderr
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "email to team@example.com sent" in json.loads(out)["reply"], out


def test_run_timeout_goes_on_counting_once_the_person_decided(dev: Dev, tmp_path: Path) -> None:
    """The clock stopped for the person starts again at the decision: an agent that then thinks
    for ever is cancelled at the timeout."""
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path)}
    env.update(
        DURABLE_AGENT_STORE=f"file:{tmp_path / 'sessions'}",
        DURABLE_AGENT_TASK_QUEUE=f"careful-{secrets.token_hex(4)}",
    )
    with worker_process(env, tmp_path, "--app", f"{OPS_APP}:app"):
        args = ["--agent", "careful", "--timeout", f"{TIMEOUT:g}"]
        proc, call = _waiting_run(env, "careful1", "Refund it.", *args)
        with _reaped(proc):
            _outlives(proc, TIMEOUT + 1.0)
            decided = run_cli(["approve", "careful1", call], env)
            assert decided.returncode == 0, decided.stderr
            _out, err = proc.communicate(timeout=TIMEOUT + CANCEL_WAIT + 30)
    assert (tmp_path / "answering").exists(), "the agent worked on after the decision"
    assert proc.returncode == 1, err
    assert f"the run did not finish in {TIMEOUT:g} s; it was cancelled" in err, err


def test_chat_asks_for_each_waiting_call(dev: Dev) -> None:
    child = pexpect.spawn(
        CLI[0],
        [*CLI[1:], "chat", "mail3"],
        env=dev.env,
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 200),
    )
    prompt = "mail3 ▸ "
    try:
        child.expect(prompt)
        child.sendline("Email the Q3 figures to the board.")
        child.expect(r"board@example\.com.*\[y / n reason / e\]")
        child.sendline("maybe")
        child.expect("answer y, n")
        child.sendline("n not before the audit")
        child.expect("tool call denied: not before the audit")
        assert "running…" not in child.before  # a denied call never runs
        child.expect(prompt)
        child.sendline("Email the Q3 figures to the team.")
        child.expect(r"team@example\.com.*\[y / n reason / e\]")
        child.sendline("e")
        child.expect_exact("arguments to change (JSON) ▸ ")
        child.sendline('["cfo@example.com"]')  # asked again: nothing decided
        child.expect_exact("it must be a JSON object")
        child.sendline("e")
        child.expect_exact("arguments to change (JSON) ▸ ")
        # the fields typed change, the model's others are kept (its subject: the question)
        child.sendline('{"to": "cfo@example.com"}')
        child.expect_exact("email to cfo@example.com sent: Email the Q3 figures to the team.")
        child.expect(prompt)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert _pending(dev.env, "mail3") == []


def test_quitting_chat_at_an_approval_leaves_the_call_pending(dev: Dev) -> None:
    """At a call's question, ``/quit`` (or Ctrl-D) was answered "answer y, n or e" over and
    over (its ``[reason]`` eaten as markup): the chat could not be left while a run waited. It
    leaves now, saying how to decide later; the call stays pending for ``approve``."""
    child = pexpect.spawn(
        CLI[0], [*CLI[1:], "chat", "mail5"], env=dev.env, encoding="utf-8", timeout=60
    )
    try:
        child.expect("mail5 ▸ ")
        child.sendline("Email the Q3 figures to the team.")
        child.expect_exact("[y / n reason / e]")
        child.sendline("/tree")
        child.expect_exact("answer y, n [reason], e, /steer TEXT, /later TEXT or /quit")
        child.sendline("/quit")
        child.expect_exact("durable-agent approve|deny mail5")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    (waiting,) = _pending(dev.env, "mail5")
    busy = run_cli(["run", "mail5", "Anything else?"], dev.env)  # says what the run waits for
    assert busy.returncode == 1 and "decide its calls (durable-agent approvals mail5)" in " ".join(
        busy.stderr.split()
    ), busy.stderr
    assert run_cli(["deny", "mail5", str(waiting["tool_call_id"])], dev.env).returncode == 0


def _story(dev: Dev, session: str) -> list[str]:
    """The stored messages of a session's active path, one short line each."""
    shown = json.loads(run_cli(["show", session, "--json"], dev.env).stdout)
    story = []
    for entry in shown["entries"]:
        message = entry.get("message")
        if message is None:
            continue
        blocks = message["content"]
        calls = [b["name"] for b in blocks if b["type"] == "tool_call"]
        text = "".join(b.get("text", "") for b in blocks if b["type"] == "text")
        if message["role"] == "tool_result":
            story.append(f"result {message['tool_name']}")
        elif calls:
            story.append("call " + " ".join(calls))
        else:
            story.append(f"{message['role']}: {text}")
    return story


def _queued(dev: Dev, session: str, n: int) -> bool:
    state = run_cli(["state", session, "--json"], dev.env)
    return state.returncode == 0 and json.loads(state.stdout).get("queued_inputs") == n


def test_chat_sends_what_is_typed_while_the_agent_works(dev: Dev) -> None:
    """In a terminal: a steer typed while a run waits on a gated call lands between its two
    tool calls, a ``/later`` after the final reply."""
    child = pexpect.spawn(
        CLI[0], [*CLI[1:], "chat", "steer1"], env=dev.env, encoding="utf-8", timeout=60
    )
    prompt = "steer1 ▸ "
    try:
        child.expect(prompt)
        child.sendline("Email the Q3 figures to the team.")
        child.expect(r"\[y / n reason / e\]")
        child.sendline("Also check the weather in Lisbon.")  # not an answer: says how to send
        child.expect("/steer TEXT, /later TEXT")
        child.sendline("/steer Also check the weather in Lisbon.")
        child.sendline("/later What's the weather in Paris?")
        wait_until(lambda: _queued(dev, "steer1", 2), within=60, what="two queued messages")
        child.sendline("y")
        child.expect("delivered into the run: Also check the weather in Lisbon")
        child.expect("delivered into the run: What's the weather in Paris")
        child.expect("Paris")
        child.expect(prompt)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    told = _story(dev, "steer1")
    assert told[:6] == [
        "user: Email the Q3 figures to the team.",
        "call send_email",
        "result send_email",
        "user: Also check the weather in Lisbon.",  # between the two tool calls
        "call get_weather",
        "result get_weather",
    ]
    assert told[6].startswith("assistant: ") and "Lisbon" in told[6]
    assert told[7:10] == [
        "user: What's the weather in Paris?",
        "call get_weather",
        "result get_weather",
    ]
    assert told[10].startswith("assistant: ") and "Paris" in told[10] and len(told) == 11


@pytest.mark.parametrize(
    ("args", "says"), [("[1]", "must be a JSON object"), ("{oops", "--args is not JSON")]
)
def test_approve_with_args_that_are_no_object_is_a_usage_error(
    tmp_path: Path, args: str, says: str
) -> None:
    """``--args`` is checked before anything is reached: one ``error:`` line, exit 2 (it was
    a traceback and exit 1: the usage error was raised outside the command's guard)."""
    result = run_cli(["approve", "s1", "c1", "--args", args], cli_env(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: ") and says in result.stderr, result.stderr


def test_deny_refuses_edited_args(tmp_path: Path) -> None:
    """``deny --args`` edits nothing (a denied call does not run): refused, exit 2, rather than
    dropped without a word."""
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1")
    result = run_cli(["deny", "s1", "c1", "--args", '{"to": "x"}'], env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and "--args" in result.stderr, result.stderr
    assert "--args" not in run_cli(["deny", "--help"], env).stdout  # not offered either
    assert "--args" in run_cli(["approve", "--help"], env).stdout


def test_an_empty_call_id_is_a_usage_error_before_temporal(tmp_path: Path) -> None:
    """No server needed to tell that "" names no call (it read 'cannot reach Temporal')."""
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1")
    for verb in ("approve", "deny"):
        result = run_cli([verb, "s1", " "], env)
        assert result.returncode == 2 and "tool call ID" in result.stderr, result.stderr


async def test_a_call_that_waits_for_nobody_is_told_before_temporal(tmp_path: Path) -> None:
    """A mistyped call ID, or a session that does not exist, read "cannot reach Temporal" when
    no server was up: the store, which answers it, is asked first (exit 3, no server needed)."""
    root = tmp_path / "sessions"
    await FileStore(root).create_session("s1")
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1", DURABLE_AGENT_STORE=f"file:{root}")
    for verb in ("approve", "deny"):
        typo = run_cli([verb, "s1", "call-9"], env)
        assert typo.returncode == 3, typo.stderr
        assert "no pending tool call 'call-9' in session 's1'" in typo.stderr, typo.stderr
        nobody = run_cli([verb, "nobody", "call-9"], env)
        assert nobody.returncode == 3 and "nobody" in nobody.stderr, nobody.stderr


async def test_the_listing_says_how_to_decide(tmp_path: Path) -> None:
    """``approvals`` listed the waiting calls and stopped there: what to type next was in
    ``--help``. It ends with the command that decides them (the call's own ID when one waits);
    the store alone answers, no Temporal."""
    root = tmp_path / "sessions"
    store = FileStore(root)
    await store.create_session("s1")
    mails = [
        ToolCall(id=f"call-{n}", name="send_email", arguments={"to": f"{n}@x"}) for n in (1, 2)
    ]
    await store.append_entries(
        "s1",
        [
            MessageEntry(id="u", message=user_message("Mail them.")),
            MessageEntry(id="a", parent_id="u", message=assistant_message(*mails)),
        ],
    )
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1", DURABLE_AGENT_STORE=f"file:{root}")
    last = "a"
    for n, mail in enumerate(mails, 1):
        request = ApprovalRequest(
            id=f"r{n}",
            parent_id=last,
            tool_call_id=mail.id,
            tool_name=mail.name,
            args=mail.arguments,
            run_id="run-1",
        )
        await store.append_entries("s1", [request])
        last = request.id
        listed = run_cli(["approvals", "s1"], env)
        assert listed.returncode == 0, listed.stderr
        lines = listed.stdout.splitlines()
        assert lines[0].startswith('call-1  send_email({"to": "1@x"})'), listed.stdout
        how = "CALL_ID" if n == 2 else "call-1"
        assert lines[-1] == f"decide: durable-agent approve|deny s1 {how}", listed.stdout
    assert run_cli(["approvals", "s1", "--json"], env).stdout.count("tool_call_id") == 2


def test_chat_on_a_parked_turn_asks_its_calls_first(dev: Dev, tmp_path: Path) -> None:
    """A message typed where a turn parked on a call (its run ended waiting) was refused in the
    library's words ("pending_approvals()", "run() with no input"): the call could only be
    decided from another shell. Chat now asks it, goes on with the turn once it is decided,
    then answers the message."""
    env = {**dev.env, "OPS_TOOL_DIR": str(tmp_path)}
    env.update(
        DURABLE_AGENT_STORE=f"file:{tmp_path / 'sessions'}",
        DURABLE_AGENT_TASK_QUEUE=f"parked-{secrets.token_hex(4)}",
    )
    with worker_process(env, tmp_path, "--app", f"{OPS_APP}:app"):
        asked = run_cli(["run", "parked1", "Refund it.", "--agent", "refunder"], env)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert len(_pending(env, "parked1")) == 1  # the run parked on it
        args = ["chat", "parked1", "--agent", "refunder"]
        child = pexpect.spawn(CLI[0], [*CLI[1:], *args], env=env, encoding="utf-8", timeout=60)
        try:
            child.expect("parked1 ▸ ")
            child.sendline("And the other one?")
            child.expect_exact("[y / n reason / e]")
            assert "pending_approvals()" not in child.before, child.before
            child.sendline("y")
            child.expect("continuing in run")
            child.expect("done: refunded 250")
            child.expect_exact("[y / n reason / e]")  # the message's own turn asks again
            child.sendline("n not twice")
            child.expect("parked1 ▸ ")
            child.sendline("/quit")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        shown = json.loads(run_cli(["show", "parked1", "--json"], env).stdout)
    said = [e["message"] for e in shown["entries"] if e.get("type") == "message"]
    story = [(m["role"], " ".join(b.get("text", "") for b in m["content"])) for m in said]
    users = [text for role, text in story if role == "user"]
    assert users == ["Refund it.", "And the other one?"], story
    assert story.index(("user", "And the other one?")) > story.index(
        ("assistant", "done: refunded 250")
    ), story
