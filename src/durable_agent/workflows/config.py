"""Connecting to Temporal: where the server is, and a failure that says where it tried.

The address comes from, in order (docs/design.md#cli: the command line resolves its
``--address``/``--namespace``/``--profile`` through the same chain, so a script and a command in
one shell reach the same server):

1. the ``temporal`` CLI's settings, read by :mod:`temporalio.envconfig`: the profile
   ``TEMPORAL_PROFILE`` names (default ``default``) in ``TEMPORAL_CONFIG_FILE`` (default
   ``~/.config/temporalio/temporal.toml``), overridden by its variables ``TEMPORAL_ADDRESS``,
   ``TEMPORAL_NAMESPACE`` (default ``default``), ``TEMPORAL_API_KEY`` (implies TLS),
   ``TEMPORAL_TLS``, ``TEMPORAL_TLS_CLIENT_CERT_PATH`` / ``TEMPORAL_TLS_CLIENT_KEY_PATH`` (mTLS),
   ``TEMPORAL_TLS_SERVER_CA_CERT_PATH`` and ``TEMPORAL_TLS_SERVER_NAME`` (the older
   ``TEMPORAL_TLS_CERT`` / ``TEMPORAL_TLS_KEY`` still work as the client certificate and key);
2. a running ``durable-agent dev`` (or ``demo``): while its server runs it advertises it in
   ``<data dir>/server.json`` (:class:`ServerInfo`; the data directory is
   ``$DURABLE_AGENT_DATA_DIR``, else ``${XDG_DATA_HOME:-~/.local/share}/durable-agent``), which
   counts only while the server's process is alive;
3. ``localhost:7233``.

A server that does not answer is a :class:`TemporalConnectError` naming the address, why that
one, and what to do. The pydantic data converter is always used.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import functools
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from temporalio.client import Client, Interceptor, Plugin
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes, PayloadCodec
from temporalio.service import RPCError, TLSConfig

__all__ = [
    "DEFAULT_ADDRESS",
    "ENV_DATA_DIR",
    "ConnectSettings",
    "ServerInfo",
    "TemporalConfigError",
    "TemporalConnectError",
    "connect",
    "connect_from_env",
    "connect_with",
    "data_dir",
    "read_server_info",
    "remove_server_info",
    "resolve_connect_settings",
    "write_server_info",
]

DEFAULT_ADDRESS = "localhost:7233"
ENV_DATA_DIR = "DURABLE_AGENT_DATA_DIR"
"""Overrides the data directory (default ``${XDG_DATA_HOME:-~/.local/share}/durable-agent``)."""
SERVER_INFO = "server.json"

_LEGACY_TLS = {
    "TEMPORAL_TLS_CERT": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_KEY": "TEMPORAL_TLS_CLIENT_KEY_PATH",
}


class TemporalConfigError(ValueError):
    """The Temporal settings cannot be used: an unknown profile, a bad config file, a TLS file
    that cannot be read."""


# -- a running `durable-agent dev` --------------------------------------------------------------


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user data directory (XDG), created on first use by whoever writes there."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_DATA_DIR)
    if explicit:
        return Path(explicit).expanduser()
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser() / "durable-agent"


@dataclass(frozen=True)
class ServerInfo:
    """A dev server some ``durable-agent dev``/``demo`` process is running right now."""

    pid: int
    """The server process."""
    owner_pid: int
    """The ``durable-agent`` process that started it (and will stop it)."""
    address: str
    ui_url: str
    task_queue: str

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


def write_server_info(root: Path, info: ServerInfo) -> None:
    """Advertise a running dev server, so that clients find it without settings."""
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (SERVER_INFO + ".tmp")
    tmp.write_text(json.dumps(asdict(info)))
    tmp.replace(root / SERVER_INFO)


def read_server_info(root: Path) -> ServerInfo | None:
    """The advertised dev server, if its process is still alive."""
    try:
        raw: dict[str, Any] = json.loads((root / SERVER_INFO).read_text())
        info = ServerInfo(
            pid=int(raw["pid"]),
            owner_pid=int(raw["owner_pid"]),
            address=str(raw["address"]),
            ui_url=str(raw["ui_url"]),
            task_queue=str(raw["task_queue"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if info.alive() else None


def remove_server_info(root: Path, owner_pid: int) -> None:
    """Withdraw the advertisement, but only our own (a later server may have replaced it)."""
    path = root / SERVER_INFO
    try:
        raw = json.loads(path.read_text())
        if int(raw.get("owner_pid", -1)) == owner_pid:
            path.unlink()
    except (OSError, ValueError, TypeError):
        pass


# -- settings and connecting ----------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectSettings:
    """Where and how to connect, resolved from a profile, the environment or a running dev."""

    address: str
    namespace: str
    # out of the repr, which a log line, a debugger or an error tracker prints (a
    # TemporalConnectError carries the settings): the key, and the TLS config's private key
    tls: TLSConfig | bool = dataclasses.field(repr=False)
    api_key: str | None = dataclasses.field(repr=False)
    profile: str
    address_source: str
    """Why this address: ``"TEMPORAL_ADDRESS"``, ``"profile 'name'"``, ``"the running
    `durable-agent dev` (pid N)"`` or ``"the default (...)"`` (the CLI adds ``"--address"``)."""
    dev_server: ServerInfo | None = None
    """The advertised ``durable-agent dev`` server the address came from, if it did."""

    def describe(self) -> str:
        """One line for messages; never the key or certificate contents."""
        extras = [f"namespace {self.namespace}"]
        if self.tls is not False:
            extras.append("TLS")
        if self.api_key:
            extras.append("API key")
        return f"{self.address} ({', '.join(extras)}; address from {self.address_source})"


class TemporalConnectError(ConnectionError):
    """No Temporal server answered where the settings point. The message says where it tried,
    why that address, and what to do; ``settings`` and ``reason`` carry the same for code."""

    def __init__(self, settings: ConnectSettings, reason: str) -> None:
        self.settings = settings
        self.reason = reason
        if settings.dev_server is not None:
            advice = (
                f"the `durable-agent dev` process {settings.dev_server.owner_pid} advertises "
                "it but it does not answer: restart `durable-agent dev`, or set TEMPORAL_ADDRESS "
                "to another server"
            )
        else:
            advice = (
                "start a server with `durable-agent dev` (clients find it by themselves), or "
                "give the address of yours: TEMPORAL_ADDRESS, a temporal CLI profile, or "
                "--address on the command line"
            )
        super().__init__(f"cannot reach Temporal at {settings.describe()}: {reason}; {advice}")

    def __reduce__(self) -> tuple[Any, ...]:
        # without ``__init__``, which takes the settings, not the message it made of them
        return (type(self).__new__, (type(self),), {**self.__dict__, "args": self.args})


_NATIVE_SETTLE = 0.05
"""Seconds a failed connect waits before raising. The SDK's native thread that reports the failure
is still letting go of the interpreter when the coroutine resumes; a script that ends at once on
the error can then abort at shutdown (exit 134, "PyGILState_Release",
https://github.com/temporalio/sdk-python/issues/300)."""


def _reason(exc: BaseException) -> str:
    """The readable part of the SDK's connect error (``... message: "Connection refused" }``)."""
    text = str(exc)
    found = re.findall(r'message: "([^"]+)"', text)
    if found:
        return str(found[-1])
    return text.removeprefix("Failed client connect: ") or type(exc).__name__


async def connect_with(
    settings: ConnectSettings,
    *,
    payload_codec: PayloadCodec | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> Client:
    """A client for resolved settings, with the pydantic data converter (which workers inherit),
    optionally a payload codec (e.g. :class:`~durable_agent.workflows.codec.AesGcmCodec`),
    interceptors (e.g. ``temporalio.contrib.opentelemetry.TracingInterceptor``) and plugins.
    Raises :class:`TemporalConnectError` when no server answers, :class:`TemporalConfigError`
    for an address that is no address (a port past 65535, not a number)."""
    converter = pydantic_data_converter
    if payload_codec is not None:
        # failure messages and stack traces are encoded too: a tool's error often quotes the
        # conversation, and Temporal keeps them plain by default
        converter = dataclasses.replace(
            converter,
            payload_codec=payload_codec,
            failure_converter_class=DefaultFailureConverterWithEncodedAttributes,
        )
    try:
        client = await Client.connect(
            settings.address,
            namespace=settings.namespace,
            tls=settings.tls,
            api_key=settings.api_key,
            data_converter=converter,
            interceptors=interceptors,
            plugins=plugins,
        )
    except (RuntimeError, RPCError) as exc:
        await asyncio.sleep(_NATIVE_SETTLE)
        raise TemporalConnectError(settings, _reason(exc)) from None
    except ValueError as exc:  # the SDK's "invalid target URL": no retry can make it reachable
        raise TemporalConfigError(f"Temporal address {settings.describe()}: {exc}") from None
    _settle_at_exit()
    return client


@functools.cache
def _settle_at_exit() -> None:
    """Give the SDK's native threads a moment before the interpreter shuts down.

    A script whose last RPC completed just before it returned aborts at exit in about 4 runs of
    10 (exit 134 or a segfault, "PyGILState_Release": the native thread that completed the RPC is
    still letting go of the interpreter, the same race as a failed connect above). Waiting
    :data:`_NATIVE_SETTLE` at exit, once per process that connected, ends it (0 of 40)."""
    atexit.register(time.sleep, _NATIVE_SETTLE)


async def connect(
    address: str,
    *,
    namespace: str = "default",
    tls: TLSConfig | bool = False,
    api_key: str | None = None,
    payload_codec: PayloadCodec | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> Client:
    """A client for ``address``, as :func:`connect_with` makes it."""
    settings = ConnectSettings(
        address, namespace, tls, api_key, profile="", address_source="the caller of connect()"
    )
    return await connect_with(
        settings, payload_codec=payload_codec, interceptors=interceptors, plugins=plugins
    )


def resolve_connect_settings(env: Mapping[str, str] | None = None) -> ConnectSettings:
    """The settings ``connect_from_env(env)`` uses, without connecting (for messages and checks):
    the chain in the module docstring.

    Raises :class:`TemporalConfigError` for an unknown profile, an unreadable config file or TLS
    file.
    """
    from temporalio.envconfig import ClientConfigProfile

    source = dict(os.environ if env is None else env)
    for old, new in _LEGACY_TLS.items():
        if source.get(old) and not source.get(new):
            source[new] = source[old]
    profile_name = source.get("TEMPORAL_PROFILE") or "default"
    try:
        profile = ClientConfigProfile.load(override_env_vars=source)
        config = profile.to_client_connect_config()
    except (RuntimeError, OSError, ValueError) as exc:
        raise TemporalConfigError(f"Temporal settings (profile {profile_name!r}): {exc}") from exc
    address: str = config.get("target_host") or ""
    dev_server: ServerInfo | None = None
    if source.get("TEMPORAL_ADDRESS"):
        address_source = "TEMPORAL_ADDRESS"
    elif address:
        address_source = f"profile {profile_name!r}"
    elif (dev_server := read_server_info(data_dir(source))) is not None:
        address = dev_server.address
        address_source = f"the running `durable-agent dev` (pid {dev_server.owner_pid})"
    else:
        address = DEFAULT_ADDRESS
        address_source = "the default (no TEMPORAL_ADDRESS, profile or running `durable-agent dev`)"
    api_key = config.get("api_key") or None
    return ConnectSettings(
        address=address,
        namespace=config.get("namespace") or "default",
        tls=config.get("tls", bool(api_key)),
        api_key=api_key,
        profile=profile_name,
        address_source=address_source,
        dev_server=dev_server,
    )


async def connect_from_env(
    env: Mapping[str, str] | None = None,
    *,
    payload_codec: PayloadCodec | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> Client:
    """Connect where the ``temporal`` CLI's settings, else a running ``durable-agent dev``, else
    the default say (the module docstring); the rest is passed to :func:`connect_with`. Raises
    :class:`TemporalConnectError` when no server answers there."""
    return await connect_with(
        resolve_connect_settings(env),
        payload_codec=payload_codec,
        interceptors=interceptors,
        plugins=plugins,
    )
