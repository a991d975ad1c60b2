"""Connecting to Temporal the way the ``temporal`` CLI does: its environment and its profiles.

Settings come from :mod:`temporalio.envconfig`: the profile ``TEMPORAL_PROFILE`` names (default
``default``) in ``TEMPORAL_CONFIG_FILE`` (default ``~/.config/temporalio/temporal.toml``),
overridden by the ``temporal`` CLI's variables: ``TEMPORAL_ADDRESS`` (default ``localhost:7233``),
``TEMPORAL_NAMESPACE`` (default ``default``), ``TEMPORAL_API_KEY`` (implies TLS), ``TEMPORAL_TLS``,
``TEMPORAL_TLS_CLIENT_CERT_PATH`` / ``TEMPORAL_TLS_CLIENT_KEY_PATH`` (mTLS),
``TEMPORAL_TLS_SERVER_CA_CERT_PATH`` and ``TEMPORAL_TLS_SERVER_NAME``. The older
``TEMPORAL_TLS_CERT`` / ``TEMPORAL_TLS_KEY`` still work as the client certificate and key. The
pydantic data converter is always used.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from temporalio.client import Client, Interceptor, Plugin
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec
from temporalio.service import TLSConfig

__all__ = [
    "DEFAULT_ADDRESS",
    "ConnectSettings",
    "TemporalConfigError",
    "connect",
    "connect_from_env",
    "resolve_connect_settings",
]

DEFAULT_ADDRESS = "localhost:7233"

_LEGACY_TLS = {
    "TEMPORAL_TLS_CERT": "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_KEY": "TEMPORAL_TLS_CLIENT_KEY_PATH",
}


class TemporalConfigError(ValueError):
    """The Temporal settings cannot be used: an unknown profile, a bad config file, a TLS file
    that cannot be read."""


@dataclass(frozen=True)
class ConnectSettings:
    """Where and how to connect, resolved from a profile and the environment."""

    address: str
    namespace: str
    tls: TLSConfig | bool
    api_key: str | None
    profile: str
    address_source: str
    """``"TEMPORAL_ADDRESS"``, ``"profile 'name'"`` or ``"default"``: says why this address."""

    def describe(self) -> str:
        """One line for messages; never the key or certificate contents."""
        extras = [f"namespace {self.namespace}"]
        if self.tls is not False:
            extras.append("TLS")
        if self.api_key:
            extras.append("API key")
        return f"{self.address} ({', '.join(extras)}; address from {self.address_source})"


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
    """A client with the pydantic data converter (which workers inherit), optionally with a
    payload codec (e.g. :class:`~durable_agent.workflows.codec.AesGcmCodec`), interceptors
    (e.g. ``temporalio.contrib.opentelemetry.TracingInterceptor``) and plugins."""
    converter = pydantic_data_converter
    if payload_codec is not None:
        converter = dataclasses.replace(converter, payload_codec=payload_codec)
    return await Client.connect(
        address,
        namespace=namespace,
        tls=tls,
        api_key=api_key,
        data_converter=converter,
        interceptors=interceptors,
        plugins=plugins,
    )


def resolve_connect_settings(env: Mapping[str, str] | None = None) -> ConnectSettings:
    """The settings ``connect_from_env(env)`` uses, without connecting (for messages and checks).

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
    if source.get("TEMPORAL_ADDRESS"):
        address_source = "TEMPORAL_ADDRESS"
    elif config.get("target_host"):
        address_source = f"profile {profile_name!r}"
    else:
        address_source = "default"
    api_key = config.get("api_key") or None
    return ConnectSettings(
        address=config.get("target_host") or DEFAULT_ADDRESS,
        namespace=config.get("namespace") or "default",
        tls=config.get("tls", bool(api_key)),
        api_key=api_key,
        profile=profile_name,
        address_source=address_source,
    )


async def connect_from_env(
    env: Mapping[str, str] | None = None,
    *,
    payload_codec: PayloadCodec | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> Client:
    """Connect as the ``temporal`` CLI's variables and profile say (see the module docstring);
    the extras are passed to :func:`connect`."""
    settings = resolve_connect_settings(env)
    return await connect(
        settings.address,
        namespace=settings.namespace,
        tls=settings.tls,
        api_key=settings.api_key,
        payload_codec=payload_codec,
        interceptors=interceptors,
        plugins=plugins,
    )
