"""The commands' usage, settings and store errors, with no server of their own: help for every
command, usage errors (a panel, or one plain line with JSON logs), an address, a store or a data
directory that cannot be used, and a store password never printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from durable_agent.cli.config import DEMO_APP
from tests.cli.support import cli_env, run_cli

pytestmark = pytest.mark.temporal


def test_ctrl_c_while_a_command_loads_says_interrupted(tmp_path: Path) -> None:
    """Ctrl-C in the second a command takes to import its parts (typer, the Temporal SDK)
    printed a ``KeyboardInterrupt`` traceback and exited -2; it says "interrupted" and exits
    130, as it does once the command runs. (The interrupt is raised where the import was.)"""
    loading = (
        "import durable_agent.cli as cli\n"
        "def command():\n"
        "    raise KeyboardInterrupt\n"
        "cli.command = command\n"
        "cli.main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", loading],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 130, done.stderr
    assert done.stderr == "interrupted\n"


def test_help_for_every_command(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    top = run_cli(["--help"], env)
    assert top.returncode == 0
    for name in ("demo", "dev", "worker", "run", "sessions", "show", "state", "chat"):
        assert name in top.stdout
        result = run_cli([name, "--help"], env)
        assert result.returncode == 0, result.stderr
        assert "Usage" in result.stdout


def test_help_tables_read_each_summary_as_one_sentence(tmp_path: Path) -> None:
    """The command tables showed a docstring's line breaks (rich help keeps a single newline),
    so a summary wrapped at 100 columns in the source broke mid-sentence on any terminal: "a
    worker that gets killed" on one line, "mid-run and replaced" on the next."""
    env = {**cli_env(tmp_path), "COLUMNS": "240"}
    top = run_cli(["--help"], env).stdout
    assert "a worker that gets killed mid-run and replaced, branch, fork" in top, top
    assert "/fork [ID], /compact [N], /tree" in top, top
    sessions = run_cli(["sessions", "--help"], env).stdout
    assert "and with --workflows its workflow histories on Temporal" in sessions, sessions
    chat = run_cli(["chat", "--help"], env).stdout
    assert "steers it (/later TEXT: a follow-up)" in chat, chat


def test_usage_and_store_errors(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    worker = run_cli(["worker"], env)
    assert worker.returncode == 2 and "--app" in worker.stderr
    bad_store = run_cli(["show", "s1", "--store", "redis://x"], env)
    assert bad_store.returncode == 2 and "unknown store" in bad_store.stderr
    markup = run_cli(["show", "s1", "--store", "bogus:[/x]"], env)
    assert markup.returncode == 2 and "bogus:[/x]" in markup.stderr, markup.stderr
    assert "Traceback" not in markup.stderr
    bad_id = run_cli(["show", "bad id"], env)
    assert bad_id.returncode == 2 and "invalid session ID" in bad_id.stderr
    # checked before Temporal is asked (whose list query it would be written into)
    quoted = run_cli(["state", 'a" OR "x', "--address", "127.0.0.1:9"], env)
    assert quoted.returncode == 2 and "invalid session ID" in quoted.stderr, quoted.stderr
    missing = run_cli(["show", "nobody"], env)
    assert missing.returncode == 3 and "no session 'nobody'" in missing.stderr
    bad_app = run_cli(["worker", "--app", "no_such_module_xyz:app"], env)
    assert bad_app.returncode == 1 and "cannot import" in bad_app.stderr
    empty = run_cli(["sessions"], env)
    assert empty.returncode == 0 and "no sessions" in empty.stdout


@pytest.mark.parametrize(
    ("args", "extra", "says"),
    [
        (["worker", "--log-format", "json", "--bogus"], {}, "No such option: --bogus"),
        (["worker", "--log-format=json", "--max-cached-workflows", "x"], {}, "--max-cached"),
        (["worker", "--bogus"], {"DURABLE_AGENT_LOG_FORMAT": "json"}, "--bogus"),
        (["show"], {"DURABLE_AGENT_LOG_FORMAT": "json"}, "Missing argument"),
        # before the command: the group's own options (--version, --help)
        (["--bogus"], {"DURABLE_AGENT_LOG_FORMAT": "json"}, "No such option: --bogus"),
        (["worker", "--app"], {"DURABLE_AGENT_LOG_FORMAT": "json"}, " worker --help"),
    ],
)
def test_usage_errors_with_json_logs_are_one_plain_line(
    tmp_path: Path, args: list[str], extra: dict[str, str], says: str
) -> None:
    """A log collector reading JSON lines gets one line for a usage error, no rich panel."""
    result = run_cli(args, cli_env(tmp_path, **extra))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], lines
    assert not set(result.stderr) & set("╭│╰─"), result.stderr


@pytest.mark.parametrize("how", [["--log-format", "json"], []])
def test_worker_json_logs_put_verbose_lines_and_warnings_in_json(
    tmp_path: Path, how: list[str]
) -> None:
    """With JSON logs every stderr line of the worker is one JSON object: the ``-v`` lines are
    log records, and so is a Python warning (the SDK's for an ``http://`` address), which was
    plain text with its source line among the JSON."""
    env = cli_env(tmp_path, **({} if how else {"DURABLE_AGENT_LOG_FORMAT": "json"}))
    args = ["worker", "--app", DEMO_APP, "-v", "--address", "http://127.0.0.1:1"]
    result = run_cli([*args, "--connect-timeout", "0", *how], env, timeout=60)
    assert result.returncode == 1, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]
    said = {" ".join(r["message"].split()[:2]): r for r in records}
    assert said["using store"]["level"] == "INFO", records
    assert said["using Temporal"]["message"].startswith("using Temporal http://127.0.0.1:1")
    warned = [r for r in records if r["logger"] == "py.warnings"]
    assert len(warned) == 1 and "UserWarning" in warned[0]["message"], records
    assert warned[0]["level"] == "WARNING"
    assert "cannot reach Temporal" in records[-1]["message"], records


SCRIPT_APP = """\
import asyncio
import pathlib

from durable_agent import ScriptedModel
from durable_agent.workflows import AgentSpec

app = {"agents": {"a": AgentSpec(model=ScriptedModel(["hi"]))}}


async def main() -> None:
    pathlib.Path(__file__).with_name("ran").write_text("the script ran")


asyncio.run(main())
"""


@pytest.mark.parametrize("form", ["file", "module"])
def test_an_app_that_runs_an_event_loop_at_import_is_one_line(tmp_path: Path, form: str) -> None:
    """An app file that is a script too, its ``asyncio.run(main())`` unguarded by ``if __name__
    == "__main__":``, is one line naming the app and what to move, exit 1: it was the
    traceback of "asyncio.run() cannot be called from a running event loop"."""
    (tmp_path / "script_app.py").write_text(SCRIPT_APP)
    ref = f"{tmp_path / 'script_app.py'}:app" if form == "file" else "script_app:app"
    env = cli_env(tmp_path, PYTHONPATH=str(tmp_path))
    result = run_cli(["worker", "--app", ref, "--address", "127.0.0.1:1"], env, timeout=60)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "ERROR" in lines[0] and ref in lines[0], lines  # a worker's error is a log line
    assert "event loop" in lines[0] and 'if __name__ == "__main__":' in lines[0], lines
    assert not (tmp_path / "ran").exists(), "the script's main did not run"


def test_usage_errors_keep_their_panel_without_json_logs(tmp_path: Path) -> None:
    result = run_cli(["worker", "--bogus"], cli_env(tmp_path))
    assert result.returncode == 2 and "╭" in result.stderr and "No such option" in result.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--keys", "no-such-keys.json"], "cannot read the keys file 'no-such-keys.json'"),
        (["--port", "99999"], "Invalid value for '--port'"),
    ],
)
def test_serve_refuses_a_bad_keys_file_or_port(tmp_path: Path, args: list[str], says: str) -> None:
    """A keys file that cannot be read or a port out of range: a usage error (exit 2) before
    anything is reached, not a traceback."""
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1", DURABLE_AGENT_LOG_FORMAT="json")
    result = run_cli(["serve", *args], env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and says in result.stderr, result.stderr


def test_no_server_is_a_clear_error(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TEMPORAL_ADDRESS="127.0.0.1:1")
    result = run_cli(["run", "s1", "hi"], env)
    assert result.returncode == 1
    assert "cannot reach Temporal at 127.0.0.1:1" in result.stderr


@pytest.mark.parametrize("address", ["127.0.0.1:99999", "localhost:port"])
@pytest.mark.parametrize("command", [["state", "s1"], ["worker", "--app", DEMO_APP]])
def test_an_address_that_is_no_address_is_a_clear_error(
    tmp_path: Path, address: str, command: list[str]
) -> None:
    """A mistyped port (``TEMPORAL_ADDRESS=localhost:72333``) is a settings error, exit 2,
    naming the address and where it came from: the SDK's ValueError was a traceback."""
    result = run_cli(command, cli_env(tmp_path, TEMPORAL_ADDRESS=address), timeout=30)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    first = result.stderr.strip().splitlines()[0]
    assert address in first and "TEMPORAL_ADDRESS" in first and "invalid" in first, first


def test_an_unusable_data_directory_is_one_line(tmp_path: Path) -> None:
    """A data directory (or store) that cannot be made, as a read-only or mistyped path: one
    ``error:`` line naming the path, before any server is started or reached."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    env = cli_env(
        tmp_path, DURABLE_AGENT_DATA_DIR=str(blocker / "data"), TEMPORAL_ADDRESS="127.0.0.1:1"
    )
    for args in (["dev", "--port", "0", "--ui-port", "0"], ["worker", "--app", DEMO_APP]):
        result = run_cli(args, env)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr, result.stderr
        assert str(blocker) in result.stderr and "Not a directory" in result.stderr


def test_unreachable_mongo_is_one_line(tmp_path: Path) -> None:
    result = run_cli(["sessions", "--store", "mongodb://127.0.0.1:1/x"], cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    # one line: where, why, and (from the store) what it was doing
    assert re.fullmatch(
        r"error: cannot reach MongoDB at 127\.0\.0\.1:1 \(.+\)( \[[a-z ]+\])?", first
    )
    assert result.stderr.splitlines()[1:] == ["  (store mongodb://127.0.0.1:1/x)"]


def test_a_mongodb_srv_host_that_does_not_resolve_is_unreachable(tmp_path: Path) -> None:
    """A ``mongodb+srv://`` host whose DNS lookup fails (no network, a typo) is a store that
    cannot be reached, exit 1 as for a server that is down: it was "invalid MongoDB URI", exit
    2, as if the command line were wrong. (``.invalid`` never resolves: RFC 2606.)"""
    spec = "mongodb+srv://u:Xy9Secret@cluster0.example.invalid/db"
    result = run_cli(["sessions", "--store", spec], cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: cannot reach MongoDB at cluster0.example.invalid ("), first
    assert "cannot resolve" in first and "invalid MongoDB URI" not in first, first
    assert "Xy9Secret" not in result.stderr


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("mongodb+srv://cluster0.example.invalid:27017/db", "must not include a port number"),
        ("mongodb://", "at least one hostname"),
        ("mongodb+srv://cluster0.example.invalid/db?bogusOpt=1", "Unknown option"),
    ],
)
def test_a_malformed_mongodb_uri_is_a_usage_error(tmp_path: Path, spec: str, says: str) -> None:
    result = run_cli(["sessions", "--store", spec], cli_env(tmp_path))
    assert result.returncode == 2, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("error: invalid MongoDB URI: ") and says in first, first


@pytest.mark.parametrize(
    "spec",
    [
        "mongodb://u:Xy9Secret@Kq7Word@127.0.0.1:1/db",  # an unescaped @ in the password
        "mongodb://u:Xy9Secret/Kq7Word@127.0.0.1:1/db",  # an unescaped /
        "MONGODB://u:Xy9Secret@127.0.0.1:1/db",  # the scheme in capitals: an unknown store
        "redis://u:Xy9Secret@127.0.0.1:1",  # another scheme: an unknown store
    ],
)
def test_a_store_password_is_never_printed(tmp_path: Path, spec: str) -> None:
    result = run_cli(["sessions", "--json", "--store", spec, "-v"], cli_env(tmp_path))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "u:***@" in result.stderr
    for part in ("Xy9Secret", "Kq7Word"):
        assert part not in result.stderr


@pytest.mark.parametrize(
    "options",
    [
        "tls=true&tlsCertificateKeyFilePassword=Xy9Secret&appname=da",
        "authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:Xy9Secret",
        "authMechanismProperties=SERVICE_NAME:db,AWS_SESSION_TOKEN:Xy9Secret&authSource=x",
    ],
)
def test_a_secret_among_the_store_uris_options_is_never_printed(
    tmp_path: Path, options: str
) -> None:
    """MongoDB takes a key file's password and an AWS session token as URI options: masked as
    the password is (the error's store line and the ``-v`` line showed them)."""
    spec = f"mongodb://127.0.0.1:1/db?{options}"
    result = run_cli(["sessions", "--json", "--store", spec, "-v"], cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert "Xy9Secret" not in result.stderr
    assert f"(store {spec.replace('Xy9Secret', '***')})" in result.stderr


@pytest.mark.mongo
def test_refused_mongo_credentials_are_one_line(mongo_uri: str, tmp_path: Path) -> None:
    from pymongo.uri_parser import parse_uri

    host, port = parse_uri(mongo_uri)["nodelist"][0]
    uri = (
        f"mongodb://da:Pw9Secret@{host}:{port}/x?directConnection=true&authMechanism=SCRAM-SHA-256"
    )
    result = run_cli(["sessions", "--json", "--store", uri], cli_env(tmp_path))
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr and "Pw9Secret" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith("error: MongoDB said: ") and "authentication" in lines[0].lower()
    assert lines[1:] == [f"  (store mongodb://da:***@{host}:{port}/x{uri.split('/x', 1)[1]})"]


@pytest.mark.parametrize("value", ["-5", "nan", "inf"])  # inf was an OverflowError traceback
def test_a_timeout_that_is_no_duration_is_a_usage_error(tmp_path: Path, value: str) -> None:
    args = ["run", "s1", "hi", "--timeout", value, "--address", "127.0.0.1:1"]
    result = run_cli(args, cli_env(tmp_path))
    assert result.returncode == 2, result.stderr
    assert "--timeout" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("value", ["nan", "-1"])
def test_a_worker_connect_timeout_that_is_no_duration_is_a_usage_error(
    tmp_path: Path, value: str
) -> None:
    """Before, ``nan`` retried an unreachable Temporal forever (no deadline ever passed)."""
    args = ["worker", "--app", "durable_agent.cli.demo_app:app", "--address", "127.0.0.1:1"]
    result = run_cli([*args, "--connect-timeout", value], cli_env(tmp_path), timeout=20)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--connect-timeout" in result.stderr


def test_the_default_address_is_named(tmp_path: Path) -> None:
    """With no flag, variable, profile or running dev, the command says it fell back to the
    default address (whatever answers there)."""
    env = cli_env(tmp_path, TEMPORAL_CONFIG_FILE=str(tmp_path / "none.toml"))
    result = run_cli(["state", "x", "-v"], env, timeout=60)
    assert result.returncode in (1, 3), result.stderr
    assert "using Temporal localhost:7233 (namespace default; address from the default (no " in (
        result.stderr
    )
    error = result.stderr.split("\nerror: ")[-1]
    assert "localhost:7233" in error, "the error names it again"
    assert error.count("localhost:7233") == 1, "once: the failure, or the target after it"


def test_help_on_an_ordinary_terminal_names_every_option_whole(tmp_path: Path) -> None:
    """On 80 columns (a terminal's default, a CI log) the help tables cut option names and
    environment variables to fit ("--max-concurrent-acti…", "DURABLE_AGENT_LOG_FORMA…"): an
    operator could not read the option to type."""
    env = {**cli_env(tmp_path), "COLUMNS": "80"}
    for name in ("demo", "dev", "serve", "worker", "run", "show", "state", "chat", "sessions"):
        shown = run_cli([name, "--help"], env).stdout
        assert "…" not in shown, shown
        assert max(map(len, shown.splitlines())) <= 80, shown
    worker = " ".join(run_cli(["worker", "--help"], env).stdout.split())
    for whole in (
        "--max-concurrent-workflow-tasks",
        "DURABLE_AGENT_MAX_CONCURRENT_WORKFLOW_TASKS",
        "DURABLE_AGENT_SHUTDOWN_GRACE",
        "DURABLE_AGENT_LOG_FORMAT",
    ):
        assert whole in worker, worker
