"""Connecting to Temporal from the standard environment variables.

``TEMPORAL_ADDRESS`` (default ``localhost:7233``), ``TEMPORAL_NAMESPACE`` (default ``default``),
``TEMPORAL_TLS_CERT`` / ``TEMPORAL_TLS_KEY`` (paths to a client certificate and key, for mTLS) and
``TEMPORAL_API_KEY`` (Temporal Cloud; implies TLS). The pydantic data converter is always used.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from temporalio.client import Client, Interceptor, Plugin
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import PayloadCodec
from temporalio.service import TLSConfig

__all__ = ["connect", "connect_from_env"]


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


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


async def connect_from_env(
    env: Mapping[str, str] | None = None,
    *,
    payload_codec: PayloadCodec | None = None,
    interceptors: Sequence[Interceptor] = (),
    plugins: Sequence[Plugin] = (),
) -> Client:
    """Connect as the standard ``TEMPORAL_*`` variables say (extras passed to :func:`connect`)."""
    env = os.environ if env is None else env
    address = env.get("TEMPORAL_ADDRESS", "localhost:7233")
    namespace = env.get("TEMPORAL_NAMESPACE", "default")
    cert, key = env.get("TEMPORAL_TLS_CERT"), env.get("TEMPORAL_TLS_KEY")
    api_key = env.get("TEMPORAL_API_KEY") or None
    tls: TLSConfig | bool = False
    if cert and key:
        tls = TLSConfig(client_cert=_read(cert), client_private_key=_read(key))
    elif api_key:
        tls = True
    return await connect(
        address,
        namespace=namespace,
        tls=tls,
        api_key=api_key,
        payload_codec=payload_codec,
        interceptors=interceptors,
        plugins=plugins,
    )
