// The chat page's session stream: read with fetch() and a small SSE parser (EventSource cannot
// send a key), which sends Last-Event-ID itself: a reload or a dropped connection resumes at the
// last seq seen. Its frames change the page's state (app.js, loaded after this file); a run's
// end no stream heard is asked for, and a streaming reply's text revealed as it comes.
"use strict";
function frame(event, data) {
  if (event === "entry") {
    const e = data.entry; state.seq = data.seq; state.tail = e.id;
    if (!state.entries.has(e.id)) { state.entries.set(e.id, e); const p = e.parent_id || ""; state.kids.set(p, [...children(p), e]); arrived(e); }
    // a session opened shows its leaf, the last entry stored (docs/design.md#store-contract);
    // from then on the view follows the branch shown
    if ((e.parent_id || "") === state.leaf || !state.leaf || state.opening) { state.leaf = e.id; said(e); }
    if (e.type === "message" && e.message.role === "user") {
      const i = state.queued.findIndex((q) => q.text === text(e.message)); if (i >= 0) state.queued.splice(i, 1);
    }
    for (const [runId, piece] of state.live) if (piece.entry_parent === (e.parent_id || "") && e.message && e.message.role === "assistant") state.live.delete(runId);
  } else if (event === "delta") {
    const shown = state.live.get(data.run_id);
    const same = !data.restart && shown && shown.entry_parent === data.entry_parent;
    const from = same ? shown.shown : 0, text = (same ? shown.text : "") + data.text, now = performance.now();
    // revealed over the time the last batch took to come (the worker's pace), within bounds
    const span = same ? Math.min(REVEAL_MS, Math.max(150, now - shown.start)) : REVEAL_MS / 2;
    state.live.set(data.run_id, { entry_parent: data.entry_parent, text, from, shown: from, start: now, span });
    if (!state.revealing) { state.revealing = true; requestAnimationFrame(reveal); }
    if (same) return; // its text grows in reveal(): the chat is not drawn again for each piece
  } else if (event === "run") {
    state.runs.set(data.run_id, data.status);
    if (data.status !== "started" && data.status !== "awaiting_approval") state.live.delete(data.run_id);
    // why, as the run's status also says (shown while it is the newest run: failing())
    if (data.status === "failed") state.failure = { run: data.run_id, text: "the run failed" + (data.error ? `: ${data.error.type}: ${data.error.message}` : "") };
    if (data.status === "cancelled") state.failure = { run: data.run_id, text: "the run was cancelled" }; // by Stop, or from elsewhere
    if (!["started", "awaiting_approval"].includes(data.status)) { unsent(data.run_id); ended(data.run_id, data.status); }
  } else if (event === "deleted") return gone(state.sid, "was deleted");
  soon();
}
function said(e) { // a new reply, once stored and whole, for a screen reader (not each token)
  if (!state.heard || e.type !== "message" || e.meta || e.message.role !== "assistant" || !text(e.message)) return;
  $("said").textContent = "Agent: " + text(e.message);
}
// A stored session's replay is thousands of frames in a few chunks: the chat is drawn once for
// all the frames that came before the next paint, not once a frame.
function soon() {
  if (!state.drawing) { state.drawing = true; requestAnimationFrame(() => { state.drawing = false; render(); }); }
}
async function settle(runId) { // a run that may have ended while no stream listened
  const sid = state.sid;
  const r = await api("GET", `/sessions/${sid}/runs/${runId}`, undefined, false, true).catch((e) => e);
  if (state.sid !== sid || !state.runs.has(runId)) return;
  if (r && r.error && r.error.type === "RunNotFoundError") { // lost: a server's in-process run
    state.runs.set(runId, "lost"); state.live.delete(runId); unsent(runId); ended(runId, "lost"); render(); // its text goes with it
  } else if (r && r.run_id && r.status !== "started" && r.status !== "awaiting_approval") {
    frame("run", r);
  }
}
// A worker writes a streaming reply's text in batches (once a second by default): each batch is
// revealed over about the time until the next, so the reply reads as a stream, not a jump a second.
const REVEAL_MS = 1000;
function reveal(now) {
  const chat = $("chat"), atEnd = chat.scrollHeight - chat.scrollTop - chat.clientHeight < 48;
  let more = false;
  for (const [runId, p] of state.live) {
    const f = Math.min(1, Math.max(0, (now - p.start) / p.span));
    const n = Math.round(p.from + (p.text.length - p.from) * f);
    if (n !== p.shown) {
      p.shown = n;
      const div = document.querySelector(`.msg.live[data-run="${CSS.escape(runId)}"]`);
      if (div) div.textContent = p.text.slice(0, n);
    }
    more = more || f < 1;
  }
  if (atEnd) chat.scrollTop = chat.scrollHeight; // a reader at the end follows the reply
  if (more) requestAnimationFrame(reveal); else state.revealing = false;
}
async function follow(sid) { // the stream, resumed at the last seq seen whenever it drops
  const abort = new AbortController(); state.abort = abort;
  let wait = 250; // doubled before each retry, to 8 s: a server or store coming back (a deploy)
  while (!abort.signal.aborted && state.sid === sid) {
    try {
      const r = await fetch(`/v1/sessions/${sid}/stream`, { signal: abort.signal,
        headers: headers({ "last-event-id": String(state.seq) }) });
      if (r.status === 404) return gone(sid, "was not found (deleted?)");
      if ([401, 403].includes(r.status)) return; // not ours: the key says so
      if (r.status === 400) { if (state.seq) open(sid); return; } // made again since: start over
      if (!r.ok) throw r.status;
      wait = 250;
      const reader = r.body.getReader(), decoder = new TextDecoder(); let buf = "", cr = "";
      for (;;) {
        const { value, done } = await reader.read(); if (done) break;
        // a read may end between a CRLF's two bytes: that CR waits for the next read, or
        // it and the LF would read as two line ends (an empty line: the event cut in two)
        let got = cr + decoder.decode(value, { stream: true });
        cr = got.endsWith("\r") ? "\r" : ""; if (cr) got = got.slice(0, -1);
        buf += got.replace(/\r\n?/g, "\n");
        let cut; while ((cut = buf.indexOf("\n\n")) >= 0) { parse(buf.slice(0, cut)); buf = buf.slice(cut + 2); }
      }
    } catch (err) { if (abort.signal.aborted) return; }
    if (state.abort === abort) state.heard = false;
    wait = Math.min(wait * 2, 8000);
    await new Promise((ok) => setTimeout(ok, wait));
  }
}
function live() { // the stream tells every change from here on, but not a run's end before it
  state.heard = true; state.opening = false; soon(); // what it says of a path no run answers holds from here on
  for (const [id, s] of state.runs) if (s === "started" || s === "awaiting_approval") settle(id);
  const last = recalled(); // this page's last run here, if nothing was stored since its end
  if (last && !state.runs.has(last.run) && (last.seq === null || last.seq === state.seq) && unfinished(path())) {
    state.runs.set(last.run, "asked"); settle(last.run);
  }
}
// The store keeps no run: the last one this browser started in a session is remembered, so a
// page opened again after it failed, was cancelled or was lost says so, not "no answer yet".
// `seq`: the session's last entry when its end was seen (null: not seen).
const runKey = () => "durable-agent-run:" + state.sid;
function remember(run, seq) { localStorage.setItem(runKey(), JSON.stringify({ run, seq })); }
function recalled() { try { return JSON.parse(localStorage.getItem(runKey())); } catch { return null; } }
function ended(runId, status) {
  const last = recalled(); if (!last || last.run !== runId || ["started", "awaiting_approval"].includes(status)) return;
  if (status === "completed") localStorage.removeItem(runKey()); else remember(runId, state.seq);
}
function parse(block) {
  let event = "message"; const data = [];
  for (const line of block.split("\n")) {
    if (line === ": live") live();
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":"), name = i < 0 ? line : line.slice(0, i);
    const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (name === "event") event = value; else if (name === "data") data.push(value);
  }
  if (data.length) frame(event, JSON.parse(data.join("\n")));
}
