"""(4) Bytes stored per chat turn: durable-agent's MongoStore vs LangGraph's MongoDBSaver.

The same conversation on both sides, on the same FerretDB, each side in its own fresh database:
every turn a ~270-character user message and an equal-sized assistant reply (with token usage);
every 5th turn the reply calls a tool, the tool answers and the model replies again. durable-agent
runs it in process (``new(model(ScriptedModel))`` with ``MongoStore``); LangGraph as its docs show a
chat graph with a checkpointer: ``StateGraph(MessagesState)`` with two nodes, ``model``
(deterministic) and ``tools``, compiled with ``MongoDBSaver``, one ``invoke`` per turn on one
``thread_id``. After 10, 100 and 500 turns: the BSON bytes of every document in the side's
database (read back raw, so this is the logical data size, without indexes or SQLite pages) and
the documents; before that the conversation is read back and its message count checked.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from _common import TEXT, figure
from bson.raw_bson import RawBSONDocument
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.mongodb import MongoDBSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from pymongo import AsyncMongoClient, MongoClient
from pymongo.database import Database

from durable_agent import model, new, tool
from durable_agent.ai import ModelRequest, Reply, ScriptedModel, ToolCall, Usage
from durable_agent.stores.mongo import MongoStore

TOOL_EVERY = 5
USAGE = Usage(input=1000, output=100)
LC_USAGE = {"input_tokens": 1000, "output_tokens": 100, "total_tokens": 1100}


def messages_after(turns: int) -> int:
    """user + reply per turn, + tool result + second reply on every 5th turn."""
    return 2 * turns + 2 * (turns // TOOL_EVERY)


# -- durable-agent -----------------------------------------------------------------------------


def user_turn(request: ModelRequest) -> tuple[int, bool]:
    """(this user turn's number, whether a tool result already came back in it)."""
    n = sum(1 for m in request.messages if m.role == "user")
    last = request.messages[-1]
    return n, last.role != "user"


def respond(request: ModelRequest) -> Reply:
    turn, after_tool = user_turn(request)
    if turn % TOOL_EVERY == 0 and not after_tool:
        call = ToolCall(id=f"call-{turn:04d}", name="lookup", arguments={"k": turn})
        return Reply(text=f"reply {turn:04d} {TEXT}", tool_calls=[call], usage=USAGE)
    return Reply(text=f"reply {turn:04d} {TEXT}", usage=USAGE)


@tool
async def lookup(k: int) -> str:
    """A deterministic tool with an equal-sized result."""
    return f"result {k:04d} {TEXT}"


# -- LangGraph ---------------------------------------------------------------------------------


def lg_model(state: MessagesState) -> dict[str, Any]:
    msgs = state["messages"]
    turn = sum(1 for m in msgs if isinstance(m, HumanMessage))
    after_tool = not isinstance(msgs[-1], HumanMessage)
    text = f"reply {turn:04d} {TEXT}"
    if turn % TOOL_EVERY == 0 and not after_tool:
        call = {"id": f"call-{turn:04d}", "name": "lookup", "args": {"k": turn}}
        reply = AIMessage(content=text, tool_calls=[call], usage_metadata=LC_USAGE)
    else:
        reply = AIMessage(content=text, usage_metadata=LC_USAGE)
    return {"messages": [reply]}


def lg_tools(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    return {
        "messages": [
            ToolMessage(content=f"result {c['args']['k']:04d} {TEXT}", tool_call_id=c["id"])
            for c in last.tool_calls
        ]
    }


def lg_route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def lg_graph(saver: MongoDBSaver) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("model", lg_model)
    builder.add_node("tools", lg_tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lg_route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


# -- measuring ---------------------------------------------------------------------------------


def stored(db: Database[Any]) -> tuple[int, int]:
    """(BSON bytes, documents) of every collection in ``db``, read back raw."""
    raw = db.with_options(
        codec_options=db.codec_options.with_options(document_class=RawBSONDocument)
    )
    total = docs = 0
    for name in raw.list_collection_names():
        for doc in raw[name].find():
            total += len(doc.raw)
            docs += 1
    return total, docs


async def run_ours(uri: str, checkpoints: list[int]) -> dict[int, tuple[int, int]]:
    name = f"peers_bytes_ours_{uuid.uuid4().hex[:8]}"
    aclient: AsyncMongoClient[Any] = AsyncMongoClient(uri)
    sync: MongoClient[Any] = MongoClient(uri)
    store = MongoStore(aclient[name])
    out: dict[int, tuple[int, int]] = {}
    try:
        agent = await new(
            model(ScriptedModel(respond)), store=store, session_id="chat", tools=(lookup,)
        )
        for turn in range(1, max(checkpoints) + 1):
            await (await agent.run(f"question {turn:04d} {TEXT}")).wait()
            if turn in checkpoints:
                n = len(await store.load_entries("chat"))
                if n != messages_after(turn):
                    raise RuntimeError(f"durable-agent stored {n} entries after {turn} turns")
                out[turn] = stored(sync[name])
        return out
    finally:
        await aclient.drop_database(name)
        await aclient.close()
        sync.close()


def run_peer(uri: str, checkpoints: list[int]) -> dict[int, tuple[int, int]]:
    name = f"peers_bytes_lg_{uuid.uuid4().hex[:8]}"
    client: MongoClient[Any] = MongoClient(uri)
    out: dict[int, tuple[int, int]] = {}
    try:
        graph = lg_graph(MongoDBSaver(client, db_name=name))
        config = {"configurable": {"thread_id": "chat"}}
        for turn in range(1, max(checkpoints) + 1):
            graph.invoke({"messages": [HumanMessage(f"question {turn:04d} {TEXT}")]}, config)
            if turn in checkpoints:
                n = len(graph.get_state(config).values["messages"])
                if n != messages_after(turn):
                    raise RuntimeError(f"LangGraph holds {n} messages after {turn} turns")
                out[turn] = stored(client[name])
        return out
    finally:
        client.drop_database(name)
        client.close()


def quadratic_at(points: dict[int, int], x: int) -> float:
    """The quadratic through three measured (turn, bytes) points, evaluated at ``x``
    (a checkpointer that saves the whole message list every step grows quadratically)."""
    (x0, y0), (x1, y1), (x2, y2) = sorted(points.items())
    return (
        y0 * (x - x1) * (x - x2) / ((x0 - x1) * (x0 - x2))
        + y1 * (x - x0) * (x - x2) / ((x1 - x0) * (x1 - x2))
        + y2 * (x - x0) * (x - x1) / ((x2 - x0) * (x2 - x1))
    )


async def bench_storage(uri: str, reps: int, full: bool) -> dict[str, Any]:
    """Ours is measured at 10, 100 and 500 turns. LangGraph at 10, 50 and 100 turns, and at 500
    only with ``full``: on FerretDB its run time grows faster than quadratically (100 turns take
    about 100 s, 500 would take hours), so by default its 500-turn bytes are extrapolated."""
    ours_at = [10, 100, 500]
    peer_at = [10, 50, 100, 500] if full else [10, 50, 100]
    raw: dict[str, list[dict[int, tuple[int, int]]]] = {"ours": [], "peer": []}
    for rep in range(reps):
        order = ["ours", "peer"] if rep % 2 == 0 else ["peer", "ours"]
        for side in order:
            if side == "ours":
                raw["ours"].append(await run_ours(uri, ours_at))
            else:
                raw["peer"].append(await asyncio.to_thread(run_peer, uri, peer_at))
        print(f"  (4) repetition {rep + 1}/{reps} done", flush=True)
    rows = []
    extrapolated: dict[str, Any] = {}
    for n in ours_at:
        if n in peer_at:
            peer_bytes = [float(r[n][0]) for r in raw["peer"]]
            peer_docs = [float(r[n][1]) for r in raw["peer"]]
            label = ""
        else:
            fits = [{k: r[k][0] for k in (10, 50, 100)} for r in raw["peer"]]
            peer_bytes = [quadratic_at(f, n) for f in fits]
            peer_docs = [r[100][1] * n / 100 for r in raw["peer"]]  # documents grow linearly
            label = " (LangGraph EXTRAPOLATED)"
            extrapolated[str(n)] = {"bytes": peer_bytes, "docs": peer_docs}
        rows.append(
            figure(
                f"bytes stored after {n} turns{label}",
                "bytes",
                [r[n][0] for r in raw["ours"]],
                peer_bytes,
                "lower",
            )
        )
        rows.append(
            figure(
                f"documents after {n} turns{label}",
                "docs",
                [r[n][1] for r in raw["ours"]],
                peer_docs,
                "lower",
            )
        )
    return {
        "peer": "langgraph MongoDBSaver, StateGraph(MessagesState) with model + tools nodes",
        "reps": reps,
        "params": {
            "ours_measured_at": ours_at,
            "peer_measured_at": peer_at,
            "tool_call_every": TOOL_EVERY,
            "message_chars": len(TEXT),
            "messages_after": {n: messages_after(n) for n in ours_at},
        },
        "peer_extrapolated": extrapolated,
        "rows": rows,
        "raw": {k: [{str(n): list(v) for n, v in r.items()} for r in rs] for k, rs in raw.items()},
    }
