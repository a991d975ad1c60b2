"""A TCP proxy a test can cut: a real network break between a client and a real server.

A client given the proxy's ``address`` (a Temporal client, say) reaches the server through it
until the test calls :meth:`TcpProxy.cut`: every connection through it is closed and new ones are
refused (nothing listens on the port); :meth:`TcpProxy.restore` listens again on the same port.
Nothing is faked: the client sees a dropped connection and a refused one, as in an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

__all__ = ["TcpProxy", "tcp_proxy"]


class TcpProxy:
    """Forwards connections on a loopback port to ``target`` (``host:port``)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def restore(self) -> None:
        """Listen (again, on the same port once it had one)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Close every connection and stop listening: new connections are refused."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._open):
            writer.transport.abort()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._open.update((writer, up_writer))
        pipes = [
            asyncio.create_task(_pipe(reader, up_writer)),
            asyncio.create_task(_pipe(up_reader, writer)),
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            self._pipes.difference_update(pipes)
            for end in (writer, up_writer):
                self._open.discard(end)
                end.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()


@contextlib.asynccontextmanager
async def tcp_proxy(target: str) -> AsyncIterator[TcpProxy]:
    """A listening :class:`TcpProxy` to ``target``, cut on exit."""
    proxy = TcpProxy(target)
    await proxy.restore()
    try:
        yield proxy
    finally:
        await proxy.cut()
