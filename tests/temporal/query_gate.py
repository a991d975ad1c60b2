"""A client interceptor that holds the ``events`` queries of a real client, so a test decides
when a run stream gets its next answer (the run itself goes on meanwhile)."""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Client, Interceptor, OutboundInterceptor, QueryWorkflowInput


class QueryGate(Interceptor):
    """Holds ``events`` queries while ``open`` is clear; ``answered`` is set after each answer."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.answered = asyncio.Event()
        self.holding = asyncio.Event()
        """Set while a query waits at the closed gate (no other one is then in flight)."""

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Gated(next, self)

    def client(self, base: Client) -> Client:
        """``base``'s connection and settings, with its queries going through this gate."""
        config = base.config()
        config["interceptors"] = [*config.get("interceptors", ()), self]
        return Client(**config)


class _Gated(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, gate: QueryGate) -> None:
        super().__init__(next)
        self.gate = gate

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        if input.query == "events" and not self.gate.open.is_set():
            self.gate.holding.set()
            await self.gate.open.wait()
            self.gate.holding.clear()
        answer = await super().query_workflow(input)
        if input.query == "events":
            self.gate.answered.set()
        return answer
