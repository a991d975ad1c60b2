"""docker-compose.yml and the Dockerfile, checked without Docker.

Compose cannot run here, so this parses the file as ``docker compose config`` would read it and
checks that it agrees with the code: every variable the worker is given is one the worker reads,
addresses point at services on the ports they listen on, the store URI opens a MongoStore for the
replica set the mongo service initiates, named volumes are declared and used, and every service
has a health check the dependants wait for.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from durable_agent.cli.appdef import load_app
from durable_agent.cli.settings import (
    DEFAULT_TASK_QUEUE,
    ENV_APP,
    ENV_STORE,
    ENV_TASK_QUEUE,
    WORKER_ENV,
)
from durable_agent.cli.stores import open_store, resolve_store_spec
from durable_agent.workflows.types import SEARCH_ATTRIBUTE

ROOT = Path(__file__).resolve().parents[2]
INTERPOLATION = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::?-[^}]*)?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


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
    from durable_agent.workflows.activity_calls import KIND_ATTRIBUTE

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


def test_mongo_replica_set_matches_the_store_uri(compose: dict[str, Any]) -> None:
    mongo = compose["services"]["mongo"]
    command = mongo["command"]
    replica_set, port = _flag(command, "--replSet"), int(_flag(command, "--port"))
    assert "--bind_ip_all" in command
    assert _published(mongo) == {port: port}
    init = mongo["healthcheck"]["test"][-1]
    assert f"_id: '{replica_set}'" in init and f"host: 'mongo:{port}'" in init

    env = compose["services"]["worker"]["environment"]
    uri = urlsplit(env[ENV_STORE])
    assert uri.scheme == "mongodb" and uri.hostname == "mongo" and uri.port == port
    assert parse_qs(uri.query)["replicaSet"] == [replica_set]
    spec = resolve_store_spec(None, env)
    assert spec == env[ENV_STORE]


async def test_worker_store_opens_a_mongo_store(compose: dict[str, Any]) -> None:
    env = compose["services"]["worker"]["environment"]
    opened = open_store(resolve_store_spec(None, env), env)  # builds the client, connects nothing
    try:
        assert type(opened.store).__name__ == "MongoStore"
        assert opened.store.database.name == "durable_agent"  # type: ignore[attr-defined]
    finally:
        await opened.close()


def test_worker_environment_is_what_the_worker_reads(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    env = worker["environment"]
    assert set(env) <= WORKER_ENV, f"unknown variables: {set(env) - WORKER_ENV}"
    for value in env.values():
        for name in INTERPOLATION.findall(str(value)):
            assert name in WORKER_ENV, f"${{{name}}} is read by nothing"
    assert env[ENV_TASK_QUEUE] == DEFAULT_TASK_QUEUE, "host-side commands find it by default"
    app = load_app(env[ENV_APP])
    assert app.agents, "the app the worker serves loads and defines agents"
    ready = _flag(worker["command"], "--ready-file")
    assert ready
    assert worker["healthcheck"]["test"] == ["CMD", "durable-agent", "worker", "--check"]
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
    for name in re.findall(r"^\s+(DURABLE_AGENT_[A-Z_]+)=", dockerfile, re.M):
        assert name in WORKER_ENV
    default_app = re.search(r"DURABLE_AGENT_APP=(\S+)", dockerfile)
    assert default_app is not None and load_app(default_app.group(1)).agents
