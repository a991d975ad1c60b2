"""The bench's scripted conversation as a LangGraph graph (for ``langgraph dev``): a question,
a ``lookup`` tool call, its result, then a reply of ~60 tokens streamed one every 20 ms by a
fake chat model. Each node notes when it returned (``stamp``): its checkpoint is stored right
after, so a ``values`` frame's latency is its arrival minus that stamp."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph

ANSWER = " ".join(f"word{i}" for i in range(60))


class Streamer(BaseChatModel):
    """Streams ``ANSWER`` in pieces of 6 characters, one every 20 ms."""

    @property
    def _llm_type(self) -> str:
        return "bench-streamer"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=ANSWER))])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: Any = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kw: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for i in range(0, len(ANSWER), 6):
            await asyncio.sleep(0.02)
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=ANSWER[i : i + 6]))
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk


class State(MessagesState):
    stamp: float


async def agent(state: State) -> dict[str, Any]:
    if not any(isinstance(m, ToolMessage) for m in state["messages"]):
        call = {"name": "lookup", "args": {"city": "Paris"}, "id": "call-1"}
        return {"messages": [AIMessage(content="", tool_calls=[call])], "stamp": time.time()}
    reply = await Streamer().ainvoke(state["messages"])
    return {"messages": [reply], "stamp": time.time()}


async def tools(state: State) -> dict[str, Any]:
    result = ToolMessage(content="sunny in Paris", tool_call_id="call-1")
    return {"messages": [result], "stamp": time.time()}


def route(state: State) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(State)
builder.add_node("agent", agent)
builder.add_node("tools", tools)
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", END])
builder.add_edge("tools", "agent")
graph = builder.compile()
