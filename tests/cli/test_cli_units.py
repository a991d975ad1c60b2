"""The CLI's pure parts: settings, store specs, app loading, rendering and the demo's model."""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from durable_agent import Event, Reply, ScriptedModel
from durable_agent.agent.events import AgentEvent
from durable_agent.ai.messages import (
    Message,
    TextContent,
    ToolCall,
    tool_result_message,
    user_message,
)
from durable_agent.ai.model import ModelRequest
from durable_agent.cli import App, AppLoadError, coerce_app, load_app
from durable_agent.cli.approvals import Lines
from durable_agent.cli.config import StoreSpecError, open_store, resolve_store_spec
from durable_agent.cli.demo_app import SLOW_TOOL, demo_spec, model_choice, respond
from durable_agent.cli.dev import say_up, workflows_url
from durable_agent.cli.processes import beat, check_liveness, free_port
from durable_agent.cli.render import LastResort, render_tree
from durable_agent.cli.run import RunPrinter
from durable_agent.durable.compaction import DEFAULT_COMPACT_PROMPT
from durable_agent.session import ApprovalDecision, ApprovalRequest, Entry, StoreUnavailableError
from durable_agent.session.entries import MessageEntry
from durable_agent.stores import FileStore
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import AgentSpec
from durable_agent.workflows.config import (
    ServerInfo,
    data_dir,
    read_server_info,
    remove_server_info,
    resolve_connect_settings,
    write_server_info,
)


def test_data_dir_follows_xdg_and_override(tmp_path: Path) -> None:
    assert data_dir({"XDG_DATA_HOME": str(tmp_path)}) == tmp_path / "durable-agent"
    assert data_dir({"DURABLE_AGENT_DATA_DIR": str(tmp_path / "x")}) == tmp_path / "x"
    assert data_dir({}) == Path.home() / ".local" / "share" / "durable-agent"


def test_store_spec_precedence(tmp_path: Path) -> None:
    env = {"XDG_DATA_HOME": str(tmp_path)}
    assert resolve_store_spec(None, env) == f"file:{tmp_path / 'durable-agent' / 'sessions'}"
    env["MONGODB_URI"] = "mongodb://m:1/db"
    assert resolve_store_spec(None, env) == "mongodb://m:1/db"
    env["DURABLE_AGENT_STORE"] = "file:/s"
    assert resolve_store_spec(None, env) == "file:/s"
    assert resolve_store_spec("file:/flag", env) == "file:/flag"


async def test_open_store_kinds(tmp_path: Path) -> None:
    opened = open_store(f"file:{tmp_path}")
    assert isinstance(opened.store, FileStore) and opened.store.root == tmp_path
    mongo = open_store("mongodb://localhost:1/?replicaSet=rs0", {"DURABLE_AGENT_MONGODB_DB": "x"})
    assert isinstance(mongo.store, MongoStore) and mongo.store.database.name == "x"
    await mongo.close()
    for bad in ("redis://x", "file:", "mongodb://[bad"):
        with pytest.raises(StoreSpecError):
            open_store(bad)


def test_server_info_round_trip(tmp_path: Path) -> None:
    import os

    info = ServerInfo(
        pid=os.getpid(), owner_pid=os.getpid(), address="127.0.0.1:1", ui_url="", task_queue="q"
    )
    write_server_info(tmp_path, info)
    assert read_server_info(tmp_path) == info
    env = {"DURABLE_AGENT_DATA_DIR": str(tmp_path), "TEMPORAL_CONFIG_FILE": str(tmp_path / "no")}
    found = resolve_connect_settings(env)
    assert (found.address, found.dev_server) == ("127.0.0.1:1", info)
    assert found.address_source == f"the running `durable-agent dev` (pid {info.owner_pid})"
    explicit = resolve_connect_settings({**env, "TEMPORAL_ADDRESS": "h:2"})
    assert (explicit.address, explicit.dev_server) == ("h:2", None)
    remove_server_info(tmp_path, owner_pid=info.owner_pid + 1)  # not ours: kept
    assert read_server_info(tmp_path) == info
    remove_server_info(tmp_path, owner_pid=info.owner_pid)
    assert read_server_info(tmp_path) is None


def test_dead_server_info_is_ignored(tmp_path: Path) -> None:
    info = ServerInfo(pid=2**22 + 12345, owner_pid=1, address="a:1", ui_url="", task_queue="q")
    write_server_info(tmp_path, info)
    assert read_server_info(tmp_path) is None


def test_connect_settings_never_show_the_api_key_or_the_tls_key(tmp_path: Path) -> None:
    """A repr is what a log line, a debugger, pytest or an error tracker prints of the settings
    (a TemporalConnectError carries them): it names where, never the credentials."""
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("CERTIFICATE-TEXT")
    key.write_text("PRIVATE-KEY-TEXT")
    env = {
        "TEMPORAL_ADDRESS": "temporal.example:7233",
        "TEMPORAL_API_KEY": "tk-very-secret-0123456789",
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "none.toml"),
    }
    mtls = {
        "TEMPORAL_ADDRESS": "temporal.example:7233",
        "TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert),
        "TEMPORAL_TLS_CLIENT_KEY_PATH": str(key),
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "none.toml"),
    }
    with_key, with_mtls = resolve_connect_settings(env), resolve_connect_settings(mtls)
    assert with_key.api_key == "tk-very-secret-0123456789"
    assert with_mtls.tls is not False
    for settings in (with_key, with_mtls):
        shown = repr(settings)
        assert "temporal.example:7233" in shown
        for secret in ("tk-very-secret", "PRIVATE-KEY-TEXT"):
            assert secret not in shown


SPEC = AgentSpec(model=ScriptedModel(["hi"]))


def test_load_app_forms(tmp_path: Path) -> None:
    assert list(load_app("durable_agent.cli.demo_app:app").agents) == ["demo"]
    app_file = tmp_path / "my_app.py"
    app_file.write_text(
        "from durable_agent import ScriptedModel\n"
        "from durable_agent.workflows import AgentSpec\n"
        "app = {'agents': {'a': AgentSpec(model=ScriptedModel(['x']))}, 'task_queue': 'q'}\n"
        "nested = type('N', (), {'inner': app})\n"
    )
    loaded = load_app(f"{app_file}:app")
    assert loaded.task_queue == "q" and list(loaded.agents) == ["a"]
    assert list(load_app(f"{app_file}:nested.inner").agents) == ["a"]
    assert coerce_app(lambda: App(agents={"x": SPEC})).agents["x"] is SPEC


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (42, "not a durable_agent.cli.App"),
        ({"agents": {}}, "defines no agents"),
        ({"agent": {}}, "unknown key"),
        ({"store": None}, "needs an 'agents' mapping"),
        ({"agents": {"a": "nope"}}, "not an AgentSpec"),
    ],
)
def test_bad_apps(value: object, message: str) -> None:
    with pytest.raises(AppLoadError, match=message):
        coerce_app(value)


def test_load_app_errors(tmp_path: Path) -> None:
    with pytest.raises(AppLoadError, match="cannot import"):
        load_app("no_such_module_abc:app")
    with pytest.raises(AppLoadError, match="no attribute"):
        load_app("durable_agent.cli.demo_app:nope")
    with pytest.raises(AppLoadError, match="no such file"):
        load_app(f"{tmp_path}/missing.py:app")
    broken = tmp_path / "broken_app.py"
    broken.write_text("import no_such_module_abc\n")
    with pytest.raises(AppLoadError, match=r"cannot import .*no_such_module_abc"):
        load_app(f"{broken}:app")


def test_free_port_prefers_the_fixed_one() -> None:
    port = free_port(None)
    assert free_port(port) == port
    assert free_port(port, avoid=[port]) != port


def test_workflows_url_quotes_the_query() -> None:
    url = workflows_url("http://127.0.0.1:8233", "demo-1")
    assert url == (
        "http://127.0.0.1:8233/namespaces/default/workflows"
        "?query=DurableAgentSessionId%3D%22demo-1%22%20AND%20DurableAgentKind%3D%22run%22"
    )


def test_the_dev_banner_keeps_each_line_whole_in_a_narrow_pipe() -> None:
    out = io.StringIO()
    lines = [
        "  worker         pid 24746, app durable_agent.cli.demo_app:app, queue durable-agent",
        "  store          file:/srv/[team]/a-long-data-directory/durable-agent/sessions",
    ]
    say_up(Console(file=out, width=40, no_color=True), *lines)
    assert out.getvalue().splitlines()[1:] == lines


def _entry(id: str, parent: str | None, text: str, role: str = "user") -> MessageEntry:
    message = Message(role=role, content=[TextContent(text=text)])
    return MessageEntry(id=id, parent_id=parent, message=message)


def test_tree_indents_only_at_branches() -> None:
    entries = [
        _entry("a", None, "q1"),
        _entry("b", "a", "r1", "assistant"),
        _entry("c", "b", "old"),
        _entry("d", "b", "new"),
    ]
    out = io.StringIO()
    Console(file=out, width=100, no_color=True).print(render_tree(entries, "d", "s"))
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("├── ● a ") and lines[2].startswith("└── ● b ")
    assert "⑂ branch 1/2" in lines[3] and "(active)" not in lines[3]
    assert "○ c user: old" in lines[4]
    assert "⑂ branch 2/2 (active)" in lines[5]
    assert "● d user: new  ◀ leaf" in lines[6]


def test_a_tree_line_is_cut_to_the_width_not_wrapped() -> None:
    """At 80 columns every long entry wrapped onto a line under the tree's guides, and the
    leaf's mark with it; each line is cut with an ellipsis, the leaf's mark kept."""
    long = "a question that goes on " * 5
    entries = [_entry("a", None, long), _entry("b", "a", long, "assistant")]
    out = io.StringIO()
    console = Console(file=out, width=60, no_color=True)
    console.print(render_tree(entries, "b", "session s", console.width))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    assert all(len(line) <= 60 for line in lines), lines
    assert lines[1].startswith("├── ● a user: a question") and lines[1].endswith("…")
    assert lines[2].startswith("└── ● b assistant: a question") and lines[2].endswith("…  ◀ leaf")


def test_tree_draws_several_roots_as_branches() -> None:
    """A retry of the first question makes a second root: it must read as a branch, in text."""
    entries = [_entry("a", None, "q1"), _entry("b", None, "q1 again")]
    out = io.StringIO()
    Console(file=out, width=100, no_color=True).print(render_tree(entries, "b", "s"))
    lines = out.getvalue().splitlines()
    assert "⑂ branch 1/2" in lines[1] and "○ a user: q1" in lines[2]
    assert "⑂ branch 2/2 (active)" in lines[3] and "● b user: q1 again  ◀ leaf" in lines[4]


def test_tree_says_what_a_call_waits_for_and_what_was_decided() -> None:
    asked = ApprovalRequest(
        id="r",
        parent_id="b",
        tool_call_id="c1",
        tool_name="send_email",
        args={"to": "a@b"},
        run_id="x",
    )
    decided = ApprovalDecision(
        id="d", parent_id="r", tool_call_id="c1", approved=False, reason="not now"
    )
    entries: list[Entry] = [_entry("b", None, "q1"), asked, decided]
    out = io.StringIO()
    Console(file=out, width=100, no_color=True).print(render_tree(entries, "d", "s"))
    lines = out.getvalue().splitlines()
    assert 'r custom approval_request: send_email({"to": "a@b"})' in lines[2]
    assert "d custom approval_decision: denied c1: not now" in lines[3]


def test_a_run_log_says_a_call_was_approved_with_edited_arguments() -> None:
    """The run log said ``✓ approved c1`` of a call a person approved with other arguments
    (``approve --args``): nothing told that it ran with them. Long ones are cut to one line."""
    out = io.StringIO()
    printer = RunPrinter(Console(file=out, width=200, no_color=True))
    for call, args in (("c1", {"to": "cfo@b"}), ("c2", {"body": "word " * 100})):
        decision = ApprovalDecision(
            id=f"d{call}", parent_id="r", tool_call_id=call, approved=True, args=args
        )
        printer.handle(_agent_event("approval_decided", entries=[decision]))
    lines = [line.strip() for line in out.getvalue().splitlines()]
    assert lines[0] == '✓ approved c1 with edited arguments {"to": "cfo@b"} dc1', lines
    assert lines[1].startswith('✓ approved c2 with edited arguments {"body": "word word'), lines
    assert lines[1].endswith("… dc2") and len(lines[1]) < 120, lines


def _agent_event(kind: str, entries: list[Any] | None = None, **fields: Any) -> Event:
    inner = AgentEvent(type=kind, **fields)
    return Event(type="agent", session_id="s", agent=inner, entries=entries)


def _denied_turn(printer: RunPrinter, *, decision_event: bool) -> None:
    if decision_event:
        decision = ApprovalDecision(id="d", parent_id="r", tool_call_id="c1", approved=False)
        printer.handle(_agent_event("approval_decided", entries=[decision]))
    printer.handle(
        _agent_event("tool_execution_start", tool_call_id="c1", tool_name="send_email", args={})
    )
    result = tool_result_message("c1", "send_email", TextContent(text="tool call denied"))
    printer.handle(_agent_event("message_end", message=result))


@pytest.mark.parametrize("told", ["by its event", "before the run"])
def test_a_denied_call_is_not_shown_as_running(told: str) -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, no_color=True)
    printer = RunPrinter(console, denied=() if told == "by its event" else {"c1"})
    _denied_turn(printer, decision_event=told == "by its event")
    printer.handle(  # an approved call of the same run still says it runs
        _agent_event("tool_execution_start", tool_call_id="c2", tool_name="get_weather", args={})
    )
    shown = out.getvalue()
    assert "send_email" in shown and "↳ send_email: tool call denied" in shown
    assert "send_email({}) running" not in shown
    assert "get_weather({}) running…" in shown


def test_a_reply_line_opens_with_its_first_text() -> None:
    """A run that fails while its model call is under way leaves no empty ``assistant ▸``
    line above its error; a reply that shows text or a call still has its prefix."""
    out = io.StringIO()
    printer = RunPrinter(Console(file=out, width=200, no_color=True))
    printer.handle(_agent_event("message_start", message=Message(role="assistant")))
    printer.finish()
    assert out.getvalue() == ""
    printer.handle(_agent_event("message_start", message=Message(role="assistant")))
    partial = Message(role="assistant", content=[TextContent(text="Hel")])
    printer.handle(_agent_event("message_update", message=partial))
    printer.finish()
    assert out.getvalue() == "  assistant ▸ Hel\n"
    call = ToolCall(id="c1", name="send_email", arguments={"to": "bob"})
    printer.handle(_agent_event("message_start", message=Message(role="assistant")))
    reply = Message(role="assistant", content=[call])
    printer.handle(_agent_event("message_end", message=reply))
    assert '  assistant ▸ → send_email({"to": "bob"})' in out.getvalue().splitlines()


def test_a_reply_cut_at_the_token_limit_says_so() -> None:
    """A reply stopped by its token limit (its cut tool call left out by the adapter) says why
    it ends there; before, it ended silently, as if the model had nothing more to say."""
    out = io.StringIO()
    printer = RunPrinter(Console(file=out, width=200, no_color=True))
    printer.handle(_agent_event("message_start", message=Message(role="assistant")))
    cut = Message(role="assistant", content=[TextContent(text="Writing")], stop_reason="length")
    printer.handle(_agent_event("message_end", message=cut))
    printer.finish()
    assert "  assistant ▸ Writing  [cut at the model's token limit]" in out.getvalue()


def test_demo_model_follows_the_question() -> None:
    sales = respond(_request(user_message("What were Q2 sales?")))
    assert sales.tool_calls[0].name == SLOW_TOOL
    assert sales.tool_calls[0].arguments == {"quarter": "Q2"}
    weather = respond(_request(user_message("What's the weather in Lisbon?")))
    assert weather.tool_calls[0].arguments == {"city": "Lisbon"}


def test_demo_model_reports_a_sent_email_in_one_sentence() -> None:
    sent = TextContent(text="email to team@example.com sent: Email the Q3 figures to the team.")
    done = respond(_request(tool_result_message("c1", "send_email", sent)))
    assert done.text == "Done: email to team@example.com sent: Email the Q3 figures to the team."


def _request(*messages: Message) -> ModelRequest:
    return ModelRequest(messages=list(messages))


def test_demo_model_is_a_function_of_the_request() -> None:
    ask = _request(user_message("Crunch the Q3 sales numbers, please."))
    first, again = respond(ask), respond(ask)
    assert first == again and first.tool_calls[0].name == SLOW_TOOL
    assert respond(_request(user_message("Crunch the Q4 numbers instead."))).text.startswith("Q4")
    summary = respond(
        _request(user_message("What's the weather in Paris?"), user_message(DEFAULT_COMPACT_PROMPT))
    )
    assert summary.text.startswith("Summary:")
    assert isinstance(respond(_request()), Reply)


def test_demo_model_choice() -> None:
    assert model_choice({}) is None
    assert model_choice({"OPENAI_API_KEY": "k"}) == "openai:gpt-4.1-mini"
    anthropic = model_choice({"ANTHROPIC_API_KEY": "k"})
    assert anthropic is not None and anthropic.startswith("anthropic:")
    assert model_choice({"DURABLE_AGENT_MODEL": "ollama:llama3", "OPENAI_API_KEY": "k"}) == (
        "ollama:llama3"
    )
    assert isinstance(demo_spec({}).model, ScriptedModel)


async def test_a_typed_line_that_is_not_utf8_is_refused_and_the_chat_reads_on(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A terminal in another encoding: a strict stdin raises on the line (which killed the reader
    thread: the chat hung), a lenient one hands lone surrogates (stored as U+FFFD). Both are
    refused with one error, as ``run`` refuses them, and the next line is read."""
    typed: list[str | BaseException] = [
        UnicodeDecodeError("utf-8", b"caf\xe9", 3, 4, "invalid continuation byte"),
        "caf\udce9",
        "café",
        EOFError(),
    ]

    def read() -> str:
        item = typed.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    lines = Lines(asyncio.get_running_loop(), read)
    assert await asyncio.wait_for(lines.get(), 10) == "café"
    assert await asyncio.wait_for(lines.get(), 10) is None
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2 and all("not valid UTF-8" in line for line in errors), errors


def test_the_health_check_says_what_it_checked(tmp_path: Path) -> None:
    """``worker --check`` proves the process alive and its loop beating; it does not ask
    Temporal (README "Health"), so its line must not claim the worker polls: during a Temporal
    outage the worker is healthy while its polls fail and retry."""
    ready = tmp_path / "ready"
    beat(ready, "agents")
    healthy, line = check_liveness(ready)
    assert healthy
    assert line.startswith(f"worker pid {os.getpid()} ") and "agents" in line
    assert "polls" not in line and "not Temporal" in line, line


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    # a worker and its clients must agree on the version (a 0.2 worker cannot replay a 0.1
    # run): the script says which one is installed, as the package and its metadata do
    from importlib.metadata import version

    import durable_agent
    from tests.cli.support import cli_env, run_cli

    assert durable_agent.__version__ == version("durable-agent")
    done = run_cli(["--version"], cli_env(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"durable-agent {durable_agent.__version__}\n"


def _last_resort(exc: Exception, capsys: pytest.CaptureFixture[str]) -> str:
    """What a command that configures no logging (``serve``, ``run``...) prints for a record
    the library logs with its exception."""
    try:
        raise exc
    except Exception:
        record = logging.LogRecord(
            "durable_agent.server",
            logging.ERROR,
            __file__,
            1,
            "following %s",
            ("s1",),
            sys.exc_info(),
        )
    LastResort().handle(record)
    return capsys.readouterr().err


def test_a_command_without_a_log_shows_a_bugs_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bug's record (``logger.exception``) keeps its traceback under ``serve`` as in a worker's
    log: it printed ``error: following s1``, the error's type, message and traceback gone."""
    shown = _last_resort(RuntimeError("the hub lost its cursor"), capsys)
    assert shown.startswith("error: following s1\nTraceback (most recent call last):\n")
    assert "in _last_resort" in shown
    assert shown.endswith("RuntimeError: the hub lost its cursor\n")


def test_a_command_without_a_log_shows_an_outage_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    down = StoreUnavailableError("cannot reach MongoDB at 127.0.0.1:1 (refused) [session 's1']")
    shown = _last_resort(down, capsys)
    assert shown == (
        "error: following s1: StoreUnavailableError: cannot reach MongoDB at 127.0.0.1:1 "
        "(refused) [session 's1']\n"
    )
