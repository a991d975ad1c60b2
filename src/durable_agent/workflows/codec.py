"""An example payload codec: AES-256-GCM, so conversation text is not readable in Temporal history.

Temporal stores workflow inputs, activity arguments and results as they are encoded: with this
codec on the client (``connect(..., payload_codec=AesGcmCodec(key))``; workers inherit it), the
server and its UI see only ciphertext. Needs the ``cryptography`` package. Keep the key out of
Temporal (an environment variable or a secret store); rotating it means decoding old histories
with the old key, so production codecs usually carry a key ID (this one writes ``key_id``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

__all__ = ["ENCODING", "AesGcmCodec"]

ENCODING = b"binary/encrypted-aesgcm"


class AesGcmCodec(PayloadCodec):
    """Encrypts every payload whole (metadata included) with a 16-, 24- or 32-byte key."""

    def __init__(self, key: bytes, key_id: str = "default") -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise ImportError(
                f"AesGcmCodec needs the 'encryption' extra of durable-agent ({exc}): "
                "pip install '.[encryption]'",
                name=exc.name,
            ) from None

        self._aead = AESGCM(key)
        self._key_id = key_id.encode()

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for payload in payloads:
            nonce = os.urandom(12)
            sealed = self._aead.encrypt(nonce, payload.SerializeToString(), self._key_id)
            out.append(
                Payload(
                    metadata={"encoding": ENCODING, "key_id": self._key_id},
                    data=nonce + sealed,
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        out = []
        for payload in payloads:
            if payload.metadata.get("encoding") != ENCODING:
                out.append(payload)  # written before the codec was configured
                continue
            if payload.metadata.get("key_id") != self._key_id:
                raise ValueError("payload encrypted with another key")
            nonce, sealed = payload.data[:12], payload.data[12:]
            decoded = Payload()
            decoded.ParseFromString(self._aead.decrypt(nonce, sealed, self._key_id))
            out.append(decoded)
        return out
