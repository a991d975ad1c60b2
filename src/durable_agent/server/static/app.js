// The chat page: sessions, a chat with live tokens, branches, fork, stop, approval prompts, and
// messages sent while the agent works (queued into the run). No build, no CDN. What the
// session's stream brings and how it is read is stream.js, loaded before this file.
"use strict";
const $ = (id) => document.getElementById(id);
const state = { sid: null, entries: new Map(), kids: new Map(), leaf: "", seq: 0, live: new Map(),
  runs: new Map(), queued: [], reasons: new Map(), failure: "", notice: "", heard: false, abort: null,
  editing: null, sends: [], tail: "" }; // editing: {id, text}, the message being edited and its draft; tail: the last entry stored
$("key").value = localStorage.getItem("durable-agent-key") || "";
$("key").onchange = () => { // what the last key was refused stops holding; a session shown is asked for again
  localStorage.setItem("durable-agent-key", $("key").value); state.notice = "";
  if (state.sid) open(state.sid); else { render(); sessions().catch(() => {}); }
};

function headers(extra) {
  const h = Object.assign({ "content-type": "application/json" }, extra || {});
  if ($("key").value) h.authorization = "Bearer " + $("key").value;
  return h;
}
async function api(method, path, body, retried, quiet) { // quiet: true, or which refusals are
  // `retried`: a request that is safe to send again (a run start names its run, a message
  // itself), sent again when its answer is lost on the way (the network, not the server,
  // failed): one run, one message, not two
  let r; const key = $("key").value; // a refusal of a key no longer given is not told (401, 403)
  if (method !== "GET") state.notice = ""; // what the last request the user made said, if it failed
  for (let attempt = 0; ; attempt++) {
    try {
      r = await fetch("/v1" + path, { method, headers: headers(),
        body: body === undefined ? undefined : JSON.stringify(body) });
      break;
    } catch (lost) {
      if (!retried || attempt >= 3) { state.notice = "network: " + lost; render(); throw lost; }
      await new Promise((go) => setTimeout(go, 250 * 2 ** attempt));
    }
  }
  // not JSON: a proxy's error page in front of the server (its status says what happened)
  const data = r.status === 204 ? {} : await r.json().catch(() => ({}));
  if (!r.ok) {
    const stale = [401, 403].includes(r.status) && key !== $("key").value;
    if (!stale && !(typeof quiet === "function" ? quiet(data) : quiet)) { state.notice = data.error ? data.error.type + ": " + data.error.message : `${r.status} ${r.statusText}`.trim(); render(); }
    throw Object.assign(data, { status: r.status }); // 4xx: refused, nothing done (sent())
  }
  return data;
}
// Newest first, 100 more each time "more" is pressed; drawn again (a session opened, made, gone),
// the list keeps as many as it showed, in pages of at most the API's 1,000.
async function sessions(more) {
  const shown = $("sessions").children.length, want = Math.max(100, shown + (more ? 100 : 0)), got = [];
  while (got.length <= want) { // one more than shown: whether there are more
    const n = Math.min(1000, want + 1 - got.length);
    const page = (await api("GET", `/sessions?limit=${n}&offset=${got.length}`)).sessions;
    got.push(...page); if (page.length < n) break;
  }
  const ul = $("sessions"), had = ul.contains(document.activeElement) && document.activeElement.textContent; ul.textContent = "";
  $("more").hidden = got.length <= want;
  for (const s of got.slice(0, want)) { // buttons: Tab reaches each, Enter or Space opens it
    const li = document.createElement("li"), b = button(s.session_id, () => open(s.session_id));
    if (s.session_id === state.sid) b.setAttribute("aria-current", "true");
    li.appendChild(b); ul.appendChild(li);
  }
  if (more) (ul.children[shown]?.firstChild || $("new")).focus(); // the first of those it brought
  else if (had) ([...ul.querySelectorAll("button")].find((b) => b.textContent === had) || $("new")).focus(); // drawn again: kept on its session
}
function children(parent) { return state.kids.get(parent) || []; } // in the order stored
function path() {
  const out = []; let id = state.leaf;
  while (id) { const e = state.entries.get(id); if (!e) break; out.push(e); id = e.parent_id || ""; }
  return out.reverse();
}
function lastLeaf(id) { // follow the newest child down from id
  for (;;) { const c = children(id); if (!c.length) return id; id = c[c.length - 1].id; }
}
function text(message) {
  return (message.content || []).filter((b) => b.type === "text").map((b) => b.text).join("");
}
// request ID -> what answered it on the path: its decision, else its result. A model may use a
// call ID again in a later reply, so an answer goes to the newest request of its call before it.
function decisions(entries) {
  const out = new Map(), asking = new Map(); // call ID -> its newest request's ID
  for (const e of entries) {
    if (e.kind === "approval_request") asking.set(e.tool_call_id, e.id);
    const call = e.kind === "approval_decision" ? e.tool_call_id : e.type === "message" && e.message.role === "tool_result" ? e.message.tool_call_id : null;
    const request = asking.get(call);
    if (request && (e.kind === "approval_decision" || !out.has(request))) out.set(request, e);
  }
  return out;
}
function approval(e, answered) { // a request: the prompt while it waits, then who decided what
  const d = answered.get(e.id), say = d && (d.approved ? "approved" : "denied");
  // approved with edited arguments: the call shows those it ran with, the model's as what was asked
  const asked = JSON.stringify(e.args), ran = d && d.approved && d.args ? JSON.stringify(d.args) : asked;
  const call = `${e.tool_name}(${ran})`;
  if (d) {
    const done = node("decision " + say, "", { call: e.tool_call_id });
    done.append(node("args", call), ` ${say} by ${d.decided_by || "?"}`);
    if (ran !== asked) done.append(", its arguments edited from ", node("args", asked));
    if (d.reason) done.append(`: ${d.reason}`); return done;
  }
  const div = node("approval", "", { call: e.tool_call_id }); div.setAttribute("role", "group"); div.setAttribute("aria-label", call);
  const reason = document.createElement("input"); reason.placeholder = "reason (to deny)"; reason.className = "reason";
  reason.value = state.reasons.get(e.tool_call_id) || ""; // kept across renders while typed
  reason.oninput = () => state.reasons.set(e.tool_call_id, reason.value);
  const group = "call:" + e.tool_call_id; reason.dataset.key = group + "|reason";
  div.append(node("args", call), " needs your approval ", button("approve", () => decide(e.tool_call_id, true), false, group + "|approve"),
    reason, button("deny", () => decide(e.tool_call_id, false, reason.value.trim() || null), false, group + "|deny"));
  return div;
}
// a call another decided first is no failure: that decision shows in the prompt's place
const decide = (callId, approved, reason) => api("POST", `/sessions/${state.sid}/approvals/${encodeURIComponent(callId)}`,
  { approved, reason }, false, (no) => !!(no.error && no.error.decision_id));
function render() { // a reader scrolled up keeps their place; one at the end follows the end
  const chat = $("chat"), top = chat.scrollTop, atEnd = chat.scrollHeight - top - chat.clientHeight < 48;
  const was = document.activeElement, key = chat.contains(was) ? was.dataset.key : null;
  const caret = key && was.selectionStart != null ? [was.selectionStart, was.selectionEnd] : null;
  const shown = path(), busy = working(), left = busy || !state.heard ? null : unfinished(shown);
  draw(chat, items(shown, left));
  for (const [runId, p] of state.live) { const d = chat.querySelector(`.msg.live[data-run="${CSS.escape(runId)}"]`), t = p.text.slice(0, p.shown);
    if (d && d.textContent !== t) d.textContent = t; } // its text grows in reveal()
  if (!busy && document.activeElement === $("stop")) $("text").focus(); // disabled, it would drop it
  $("stop").disabled = !busy; $("fork").disabled = !state.sid;
  const asks = [...state.runs.values()].includes("awaiting_approval");
  const status = state.notice || (asks ? "waiting for your decision" : busy ? "working…"
    : failing() || (left ? left[1] : ""));
  if ($("status").textContent !== status) $("status").textContent = status; // a live region: changes only
  $("text").placeholder = busy ? "Tell the agent while it works" : "Ask something";
  chat.scrollTop = atEnd ? chat.scrollHeight : top;
  if (key && document.activeElement !== was) refocus(key, caret);
}
// The chat's elements, each named by all it shows (`shows`): a drawing keeps those it still
// shows as they are (the focus, a caret, a screen reader's place in them) and makes only what
// is new or changed. Redrawing all of it took ~150 ms per stored entry at 3,000 entries.
function draw(chat, items) {
  const want = new Set(items.map((i) => i[0])), kept = new Map();
  for (const el of [...chat.children]) {
    if (want.has(el.dataset.shows) && !kept.has(el.dataset.shows)) kept.set(el.dataset.shows, el); else el.remove();
  }
  let at = chat.firstElementChild;
  for (const [shows, make] of items) {
    let el = kept.get(shows);
    if (!el) { el = make(); el.dataset.shows = shows; }
    if (el === at) at = at.nextElementSibling; else chat.insertBefore(el, at);
  }
}
function items(shown, left) { // [what it shows, how to make it], in the chat's order
  const out = [], answered = decisions(shown), editing = state.editing ? state.editing.id : null;
  const prompted = (e) => { if (e.kind !== "approval_request") return false; const d = answered.get(e.id); return !d || d.kind === "approval_decision"; };
  // a call with a prompt or a decision drawn shows its arguments there, not in its reply too
  const asked = new Set(); let reply = ""; // reply ID|call ID
  for (const e of shown) if (e.type === "message" && e.message.role === "assistant") reply = e.id; else if (prompted(e)) asked.add(`${reply}|${e.tool_call_id}`);
  for (const e of shown) {
    if (prompted(e)) {
      const d = answered.get(e.id); out.push([`a:${e.id}:${d ? d.id : ""}`, () => approval(e, answered)]);
    } else if (e.type === "compaction") out.push([`c:${e.id}`, () => compaction(e)]);
    else if (e.type === "message" && !e.meta) {
      const siblings = children(e.parent_id || ""), i = siblings.indexOf(e);
      const calls = (e.message.content || []).filter((b) => b.type === "tool_call" && !asked.has(`${e.id}|${b.id}`));
      const key = `m:${e.id}:${i}/${siblings.length}:${e.id === editing}:${calls.map((c) => c.id).join(",")}`;
      out.push([key, () => message(e, siblings, i, calls)]);
    }
  }
  for (const [runId, piece] of state.live) {
    if (piece.entry_parent === state.leaf) out.push([`l:${runId}`, () => node("msg assistant live", "", { run: runId })]);
  }
  for (const q of state.queued) out.push([`q:${q.message_id}`, () => node("msg user queued", q.text)]);
  if (left) out.push([`u:${left.join("|")}`, () => { // no run goes and the path waits for an answer
    const d = node("unfinished", left[2]); d.append(button(left[3], () => ask(null, left[0]), false, "end|go")); return d;
  }]);
  return out;
}
function compaction(e) { // what the model reads from here on instead of what is above
  return node("msg compaction", `Summarized for the model: ${e.summary}`, { id: e.id });
}
function node(className, content, data) {
  const d = document.createElement("div"); d.className = className; d.textContent = content;
  Object.assign(d.dataset, data || {}); return d;
}
function message(e, siblings, i, calls) { // calls: those it shows (items())
  const m = e.message, div = node("msg " + (m.role === "tool_result" ? "tool" : m.role), "", { id: e.id });
  if (siblings.length > 1) {
    const nav = node("nav", ""); nav.setAttribute("role", "group"); nav.setAttribute("aria-label", "branch");
    const group = "nav:" + (e.parent_id || "");
    const back = button("<", () => pick(siblings[i - 1]), i === 0, group + "|<");
    const on = button(">", () => pick(siblings[i + 1]), i === siblings.length - 1, group + "|>");
    back.setAttribute("aria-label", "previous branch"); on.setAttribute("aria-label", "next branch");
    nav.append(back, ` ${i + 1}/${siblings.length} `, on); div.appendChild(nav);
  }
  if (state.editing && state.editing.id === e.id) { div.appendChild(editor(e)); return div; }
  div.appendChild(document.createTextNode(m.role === "tool_result" ? text(m) || JSON.stringify(m.content) : text(m)));
  const cut = { aborted: "stopped before the end", error: "failed before the end", length: "cut at the model's token limit" }[m.stop_reason];
  if (m.role === "assistant" && cut) div.appendChild(node("cut", `(${cut})`));
  if (calls.length) div.appendChild(node("tools", calls.map((c) => `→ ${c.name}(${JSON.stringify(c.arguments || {})})`).join("\n"))); // no arguments: none sent
  if (m.role === "user") {
    const a = node("actions", "");
    a.append(button("edit", () => edit(e), false, `msg:${e.id}|edit`),
      button("retry", () => ask(text(m), e.parent_id || ""), false, `msg:${e.id}|retry`));
    div.appendChild(a);
  }
  return div;
}
// Where the path's end waits for an answer while no run goes, else null: [the entry a run goes
// on from, the status, the notice, its button]. A run left a call with no result (that run
// repairs it, docs/design.md#repair-and-reconcile), a tool's result, a turn whose calls are all
// decided, a reply cut short (gone on from: the model reads it); a question with no reply is
// said cut off only if this page saw a run end unfinished (one appended through the library
// never had a run).
function unfinished(shown) {
  const e = shown[shown.length - 1], m = e && e.type === "message" ? e.message : null;
  const cut = [e && e.id, "the last run did not finish", "The last run did not finish. ", "continue"];
  if (e && ["approval_request", "approval_decision"].includes(e.kind)) { // not while a call waits for a decision
    const answered = decisions(shown); return shown.some((r) => r.kind === "approval_request" && !answered.has(r.id)) ? null : cut;
  }
  if (!m) return null;
  const lost = [...state.runs.values()].some((s) => ["failed", "cancelled", "lost"].includes(s));
  if (m.role === "user") return lost ? [e.id, cut[1], "No answer: the last run did not finish. ", "answer"] : [e.id, "no answer yet", "No answer yet. ", "answer"];
  const stopped = m.role === "assistant" && (m.stop_reason === "aborted" || m.stop_reason === "error");
  return stopped || m.role !== "assistant" || (m.content || []).some((b) => b.type === "tool_call") ? cut : null;
}
// A control the keyboard was on that a drawing made anew (a message edited or not) is focused
// again (a reason being typed keeps its caret); one gone (a decided call) leaves the focus on the
// next of its group, else the next prompt, else the box, not on the page's start.
function refocus(key, caret) {
  const chat = $("chat"), group = CSS.escape(key.split("|")[0] + "|");
  const to = [`[data-key="${CSS.escape(key)}"]`, `[data-key^="${group}"]`, ".approval button"]
    .map((q) => chat.querySelector(q + ":not(:disabled)")).find(Boolean) || $("text");
  to.focus({ preventScroll: true });
  if (caret && to.setSelectionRange) to.setSelectionRange(caret[0], caret[1]);
}
function button(label, onclick, disabled, key) { // key: what it is, to focus it again (refocus)
  const b = document.createElement("button"); b.textContent = label; b.disabled = !!disabled;
  if (key) b.dataset.key = key;
  // a refused request is told in the status line (api): not an error of the page
  b.onclick = (ev) => { ev.preventDefault(); Promise.resolve(onclick()).catch(() => {}); }; return b;
}
function pick(entry) { state.leaf = lastLeaf(entry.id); state.opening = false; render(); }
function edit(entry) { // in place: the message becomes a box with its text
  state.editing = { id: entry.id, text: text(entry.message) }; render();
  const box = $("chat").querySelector(`[data-key="${CSS.escape("msg:" + entry.id + "|box")}"]`);
  box.focus(); box.select();
}
function editor(e) { // the edited text is asked from the original's parent: a new branch
  const div = document.createElement("div"), box = document.createElement("textarea"), key = `msg:${e.id}|`;
  box.value = state.editing.text; box.dataset.key = key + "box"; box.setAttribute("aria-label", "Edit your message");
  box.rows = Math.min(8, box.value.split("\n").length + 1); box.className = "editor";
  box.oninput = () => { state.editing.text = box.value; }; // kept across renders while typed
  const cancel = () => { state.editing = null; render(); };
  const save = () => {
    const t = box.value.trim(); if (!t) return;
    state.editing = null; ask(t, e.parent_id || "").catch((no) => { if (!(no && no.arrived)) { state.editing = { id: e.id, text: t }; render(); } });
  };
  box.onkeydown = (ev) => {
    if (ev.key === "Escape") { ev.preventDefault(); cancel(); }
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); save(); }
  };
  div.append(box, button("save", save, false, key + "save"), button("cancel", cancel, false, key + "cancel"));
  return div;
}
function newId() { // 16 hex, as the server's own run IDs
  return [...crypto.getRandomValues(new Uint8Array(8))].map((b) => b.toString(16).padStart(2, "0")).join("");
}
// Why the newest run this page knows of ended, if it failed or was cancelled: a late end of an
// older run (a resumed stream's, an answer to a status read) says nothing of the one after it.
function failing() { const f = state.failure; return f && [...state.runs.keys()].pop() === f.run ? f.text : ""; }
function working() { return [...state.runs.values()].some((s) => s === "started" || s === "awaiting_approval"); }
// A send the server did not refuse (a 5xx, a proxy's page, the network) may still take effect:
// on Temporal a message no worker took in time is delivered when one polls. Its text, sent
// again, goes under the same ID (one message or run, not two); its arrival (before its answer
// or after) keeps it out of the box. `sends`: those going and those that failed so.
function sending(key, t) { // the same text sent twice while the first goes: two
  let a = state.sends.find((s) => s.key === key && !s.going);
  if (!a) state.sends.push((a = { key, text: t, id: newId() }));
  a.going = true; return a;
}
function sent(attempt, refusal) { // refusal: what the request failed with, none if it did not
  attempt.going = false; if (refusal && attempt.came) refusal.arrived = true; // taken after all: the text stays out of the box
  if (refusal) attempt.notice = state.notice; // what its failure said, until it arrives after all
  if (!refusal || attempt.came || refusal.status >= 400 && refusal.status < 500) state.sends = state.sends.filter((s) => s !== attempt);
}
async function tell(t) { // into the running run: shown queued until its delivery comes as an entry
  const attempt = sending("message|" + t, t); let r;
  try {
    r = await api("POST", `/sessions/${state.sid}/messages`, { text: t, message_id: attempt.id }, true);
  } catch (e) { // the run ended before it took the message: a new run takes it
    sent(attempt, e);
    if (e && e.error && e.error.type === "RunNotAcceptingError") return ask(t, state.leaf);
    throw e;
  }
  sent(attempt); if (!attempt.came) state.queued.push({ message_id: r.message_id, text: t, run: r.run_id }); render();
}
function arrived(e) { // a send going or failed (sending()) that took effect: its text leaves the box
  if (e.type !== "message" || e.message.role !== "user") return;
  const t = text(e.message); if (state.queued.some((q) => q.text === t)) return; // one accepted before it: delivered first
  const a = state.sends.find((s) => s.text === t); if (!a) return;
  a.came = true; state.sends = state.sends.filter((s) => s !== a); if ($("text").value.trim() === a.text) $("text").value = "";
  if (a.notice && state.notice === a.notice) state.notice = ""; // it was taken: the failure said otherwise
}
// A run that ended (failed, or lost with its server) before storing the messages it held (a
// cancelled run stores them): they come back into the box, none shown queued for ever.
function unsent(runId) {
  const back = state.queued.filter((q) => q.run === runId); if (!back.length) return;
  state.queued = state.queued.filter((q) => q.run !== runId);
  $("text").value = [...back.map((q) => q.text), $("text").value].filter(Boolean).join("\n\n");
  state.notice = (failing() ? failing() + "; " : "") + "not sent to the agent: your message is back in the box";
}
async function ask(t, leaf) {
  if (switching) await switching; // a refusal: the text goes back into the box
  if (!state.sid) await newSession();
  // into the run if it goes on the branch shown (its end is the session's), else a run from
  // the branch shown, which a run going refuses (409): the text stays in the box
  if (leaf === undefined && working()) { if (state.leaf === state.tail) return tell(t); leaf = state.leaf; }
  const from = leaf !== undefined ? leaf : state.leaf, attempt = sending(`run|${from}|${t}`, t);
  const body = t === null ? { inputs: [], run_id: attempt.id } : { text: t, run_id: attempt.id }; // null: go on
  if (leaf !== undefined || state.leaf) body.leaf_id = from;
  const was = state.leaf, to = (state.leaf = body.leaf_id || ""); // the view follows the new run's branch (set before its entries come)
  const heard = state.heard; // the stream listened before the run started: it will hear its end
  state.failure = "";
  const r = await api("POST", `/sessions/${state.sid}/runs`, body, true).catch((refused) => { // no branch: the chat stays where it was (a run going)
    sent(attempt, refused); if (state.leaf === to) { state.leaf = was; render(); } throw refused; });
  sent(attempt);
  if (!state.runs.has(r.run_id)) state.runs.set(r.run_id, "started"); // unless its end came first
  remember(r.run_id, null); ended(r.run_id, state.runs.get(r.run_id));
  render();
  if (!heard) settle(r.run_id);
}
function reset(sid) {
  if (state.abort) state.abort.abort();
  Object.assign(state, { sid, entries: new Map(), kids: new Map(), leaf: "", seq: 0, live: new Map(), runs: new Map(), queued: [], failure: "", heard: false, editing: null, sends: [], tail: "", opening: true });
  history.replaceState(null, "", sid ? "#" + sid : location.pathname); $("title").textContent = sid || "No session";
}
async function open(sid) { reset(sid); render(); sessions().catch(() => {}); follow(sid); } // a refusal: the status line
// A session deleted (here or elsewhere) or not there: none of it stays shown, and what is typed
// next starts a new session, not the gone one again under its ID (its reply unfollowed).
function gone(sid, why) {
  localStorage.removeItem("durable-agent-run:" + sid);
  if (state.sid === sid) { reset(null); state.notice = `session ${sid} ${why}`; render(); sessions().catch(() => {}); }
}
// A session being made (new, or a fork): what is sent meanwhile waits and goes into it, not
// into the one still shown (its answer unseen once the page switched).
let switching = null;
function switchTo(made) { // made: the request that answers the session to open
  const s = (switching = made.then((x) => open(x.session_id)));
  const clear = () => { if (switching === s) switching = null; };
  s.then(clear, clear); return s;
}
function newSession() { return switchTo(api("POST", "/sessions", {})); }
$("more").onclick = () => sessions(true).catch(() => {}); // a refusal shows in the status line
$("new").onclick = () => newSession().then(() => $("text").focus(), () => {}); // to type the first message (api tells a refusal)
$("ask").onsubmit = (ev) => { // what could not be sent goes back into the box
  ev.preventDefault(); const t = $("text").value.trim(); if (!t) return;
  $("chat").scrollTop = $("chat").scrollHeight; // who asks reads the answer
  $("text").value = ""; ask(t).catch((e) => { if (!$("text").value && !(e && e.arrived)) $("text").value = t; });
};
$("text").onkeydown = (ev) => { // Enter sends, Shift+Enter starts a new line
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $("ask").requestSubmit(); }
};
$("stop").onclick = () => { for (const [id, s] of state.runs) if (s === "started" || s === "awaiting_approval") api("POST", `/sessions/${state.sid}/runs/${id}/cancel`).catch(() => {}); };
$("fork").onclick = () => switchTo(api("POST", `/sessions/${state.sid}/fork`, { leaf_id: state.leaf })).catch(() => {});
if (location.hash.length > 1) open(decodeURIComponent(location.hash.slice(1))); // it lists them
else sessions().catch(() => {});
