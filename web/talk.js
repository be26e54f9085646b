// The talk page (SPEC WEB-1, RES-2, RES-5, CONV-1 … CONV-3, RTC-2): one voice session at a time
// over realtime.js, microphone and playback from audio.js, the transcript saved by records.js.
//
// Transport: realtime.js talks WebRTC when it can and a WebSocket otherwise; the connection
// pill says which. Everything here is the same over both but the audio: over the WebSocket the
// page plays the answer (Player) and reports what it played; over WebRTC the answer is a remote
// track played by an <audio> element, and the server knows what it played out.
//
// Identity: "New conversation" makes a new page record and a new thread; "continue" (from
// history: index.html?continue=<record id>) keeps the record id and asks the server to continue
// its thread (requested_thread_id + previous_voice_session_id). Transcript entries are keyed by
// voice session + generation / item id, and earlier messages by their record index, so a new
// session's generation 1 can never overwrite an old session's message.
//
// Thread memory: the panel beside the transcript (thread_memory.js) shows the memory of the
// record's thread — from the session's start, or of a continued record at once — and follows
// `openrealtime.thread_memory.updated` while a session runs.
//
// Turn display: level_meter.js draws the microphone's level (from the capture worklet, never
// sent) and who has the turn (from the server's events); timeline.js puts each answer's
// latency timeline (openrealtime.turn.latency) under it, and how much of an interrupted
// answer was heard.

import { api, downloadJson, el, errorText, listRoles, signedIn, token } from "./api.js";
import { Microphone, Player } from "./audio.js";
import { LevelMeter, TurnIndicator } from "./level_meter.js";
import { RealtimeConnection, realtimeUrl } from "./realtime.js";
import { newRecord, RecordSaver } from "./records.js";
import { ThreadMemoryPanel } from "./thread_memory.js";
import { attachTimeline, markHeard } from "./timeline.js";
import { ApprovalPanel } from "./approvals.js";

const $ = (id) => document.getElementById(id);
const PLAYBACK_REPORT_MS = 250;
const TURNS_KEPT = 100; // per-generation facts (audioMs, latency) kept for the latest turns
const TRANSPORT_LABELS = { webrtc: "WebRTC", websocket: "WebSocket" };

const STATE_LABELS = {
  idle: "not connected",
  connecting: "connecting…",
  connected: "connected",
  reconnecting: "reconnecting…",
  lost: "session ended",
  failed: "disconnected",
  closed: "closed",
};

// Everything the page knows, also reachable as window.openrealtime for diagnostics and tests.
const talk = {
  conn: null,
  session: null,
  mic: null,
  player: null,
  saver: null,
  record: null,
  continuing: false,
  micPaused: false, // the person paused the microphone: the page sends no audio
  serverPaused: false, // the server acknowledged the pause (openrealtime.input.paused)
  listening: new Set(), // keys of user speech not committed yet (a pause drops it)
  interrupted: new Set(),
  lastInterruption: null,
  interruptions: {},
  playbackReports: [],
  outputAudio: [], // WebRTC: the server's output_audio_buffer.* events ({type, response_id})
  items: new Map(),
  generations: new Map(), // response id → generation, while the response runs
  reported: {},
  sessionJournaled: false,
  keyPrefix: "pending", // transcript keys of the current session: session id (+ ~epoch)
  sessionStart: 0,
  recording: Promise.resolve(),
  audioMs: {}, // generation → ms of answer audio received (WebSocket), for "heard N of M s"
  latency: {}, // generation → its openrealtime.turn.latency event (this session)
};
window.openrealtime = talk;

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

function setConnection(state, detail = {}) {
  const pill = $("connection");
  pill.dataset.state = state;
  let label = STATE_LABELS[state] || state;
  const kind = talk.conn && talk.conn.kind;
  if (state === "connected" && kind) label = `connected · ${TRANSPORT_LABELS[kind]}`;
  if (state === "connected" && talk.conn.resumes > 0) label += ` (resumed ×${talk.conn.resumes})`;
  if (state === "failed" && detail.code) label = `disconnected (${detail.code})`;
  pill.textContent = label;
  pill.dataset.transport = state === "idle" ? "" : kind || "";
  const fallback = talk.conn && talk.conn.fallback;
  pill.title = fallback && kind === "websocket" ? `WebRTC did not connect (${fallback.code}): using a WebSocket` : "";
  const live = state === "connected";
  if (talk.indicator && (live || state === "idle")) talk.indicator.signal(live ? "connected" : "closed");
  $("type-text").disabled = !live;
  $("type-send").disabled = !live;
  $("mic").disabled = !live || !talk.mic;
}

// ------------------------------------------------------------------ transcript

function scrollDown() {
  const box = $("transcript");
  box.scrollTop = box.scrollHeight;
}

function showItem(key, role, text, { partial = false, earlier = false } = {}) {
  let node = talk.items.get(key);
  if (!node) {
    node = el("div", { class: `msg ${role}`, "data-key": key, "data-role": role });
    node.append(el("span", { class: "text" }), el("span", { class: "note hidden" }));
    talk.items.set(key, node);
    $("transcript").append(node);
  }
  node.querySelector(".text").textContent = text;
  node.classList.toggle("partial", partial);
  node.classList.toggle("earlier", earlier);
  scrollDown();
  return node;
}

function noteItem(key, text) {
  const node = talk.items.get(key);
  if (!node) return;
  const note = node.querySelector(".note");
  note.textContent = text;
  note.classList.toggle("hidden", !text);
}

function removeItem(key) {
  const node = talk.items.get(key);
  if (node) node.remove();
  talk.items.delete(key);
}

function divider(text) {
  $("transcript").append(el("div", { class: "divider" }, text));
}

function clearTranscript() {
  $("transcript").replaceChildren();
  talk.items.clear();
}

/** Add a final message to the page record; calls are queued so the order is kept. */
function recordMessage(role, text) {
  if (!text) return talk.recording;
  const { record, saver, session } = talk;
  const at = new Date().toISOString();
  talk.recording = talk.recording.then(async () => {
    if (!talk.sessionJournaled && session) {
      // From now on this session appears in the thread's journal: a later "continue" names it.
      talk.sessionJournaled = true;
      await saver.update(record.id, { voice_session_id: session.id, thread_id: session.thread_id });
    }
    await saver.append(record.id, { role, text, at });
  });
  return talk.recording;
}

// ------------------------------------------------------------------ saving

function showSaveStatus(status) {
  if (!talk.record || status.id !== talk.record.id) return;
  const labels = {
    saved: `saved · ${status.confirmed} messages`,
    saving: "saving…",
    pending: "not saved yet",
    retrying: `not saved (${status.error || "offline"}) · retrying in ${Math.ceil(status.retryInMs / 1000)} s · kept on this device`,
    conflict: "not saved: conflict",
    rejected: "not saved: rejected",
  };
  $("save-state").textContent = labels[status.state] || status.state;
  $("save-state").dataset.state = status.state;
  const stopped = status.state === "conflict" || status.state === "rejected";
  $("save-problem").classList.toggle("hidden", !stopped);
  if (stopped) {
    $("save-problem-text").textContent =
      `Automatic saving stopped: ${status.error}. Your copy is kept on this device; export it before discarding. `;
  }
}

// ------------------------------------------------------------------ session

function onEvent(event) {
  const sid = talk.keyPrefix;
  talk.indicator.signal(event.type);
  if (talk.approvals) talk.approvals.onEvent(event); // tool approvals (web/approvals.js)
  // Turns are journaled: the thread's head moves on (its memory maybe not).
  if (talk.threadMemory && /^(response\.(created|done)|input_audio_buffer\.committed)$/.test(event.type)) {
    talk.threadMemory.conversationMoved();
  }
  switch (event.type) {
    case "input_audio_buffer.speech_started":
      showItem(`${sid}:u:${event.item_id}`, "user", "…", { partial: true });
      talk.listening.add(`${sid}:u:${event.item_id}`);
      break;
    case "input_audio_buffer.committed":
      talk.listening.delete(`${sid}:u:${event.item_id}`);
      if (talk.items.has(`${sid}:u:${event.item_id}`)) {
        showItem(`${sid}:u:${event.item_id}`, "user", "… (transcribing)", { partial: true });
      }
      break;
    case "conversation.item.input_audio_transcription.delta": {
      // A partial transcript of long speech (every few seconds while the person talks).
      const text = (event.transcript || "").trim();
      if (text) showItem(`${sid}:u:${event.item_id}`, "user", `${text} …`, { partial: true });
      break;
    }
    case "conversation.item.input_audio_transcription.completed": {
      const key = `${sid}:u:${event.item_id}`;
      const text = (event.transcript || "").trim();
      if (!text) {
        removeItem(key);
        break;
      }
      showItem(key, "user", text);
      recordMessage("user", text);
      break;
    }
    case "response.created": {
      const generation = event.response.generation;
      talk.generations.set(event.response.id, generation);
      showItem(`${sid}:g${generation}`, "assistant", "…", { partial: true });
      break;
    }
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta": { // the answer's words (spoken, or text-only)
      const generation = talk.generations.get(event.response_id);
      if (generation === undefined) break; // its start was in a range the server gave up
      const key = `${sid}:g${generation}`;
      const node = talk.items.get(key);
      const before = node ? node.querySelector(".text").textContent.replace(/^…$/, "") : "";
      showItem(key, "assistant", before + event.delta, { partial: true });
      break;
    }
    case "response.output_audio.done": {
      const generation = talk.generations.get(event.response_id);
      if (talk.player && generation !== undefined) talk.player.end(generation);
      break;
    }
    case "openrealtime.response.interrupted":
      interrupt(event.generation, event.reason);
      break;
    case "openrealtime.output_audio.paused": // sound over the answer: hold it
      if (talk.player) talk.player.pause();
      break;
    case "openrealtime.output_audio.resumed": // it was no real turn: play on
      if (talk.player) talk.player.resume();
      break;
    case "response.done": {
      const response = event.response;
      talk.generations.delete(response.id);
      const key = `${sid}:g${response.generation}`;
      const text = ((response.interrupted ? response.heard_text : response.output_text) || "").trim();
      if (!text && !response.output_text) {
        removeItem(key);
      } else {
        showItem(key, "assistant", text || "(interrupted before any was heard)");
      }
      if (response.interrupted) {
        noteItem(key, interruptionNote(response.generation));
        showHeard(key, response);
      }
      else if (response.status === "failed") noteItem(key, "the answer failed; try again");
      recordMessage("assistant", text);
      break;
    }
    case "output_audio_buffer.started": // WebRTC: the server began playing an answer out
    case "output_audio_buffer.stopped": // … played it to the end
    case "output_audio_buffer.cleared": // … cut it (an interruption, or our clear)
      talk.outputAudio.push({ type: event.type, response_id: event.response_id });
      if (talk.outputAudio.length > 200) talk.outputAudio.shift();
      $("playback").textContent = {
        "output_audio_buffer.started": "Playing",
        "output_audio_buffer.stopped": "Played",
        "output_audio_buffer.cleared": "Playback cleared",
      }[event.type];
      break;
    case "openrealtime.turn.latency":
      $("playback").dataset.latency = String(event.latency_ms.first_audio_sent ?? "");
      keepLatest(talk.latency);
      talk.latency[event.generation] = event;
      attachTimeline(talk.items.get(`${sid}:g${event.generation}`), event);
      break;
    case "openrealtime.input.paused":
      // The server dropped speech it had not committed: it will never be transcribed.
      for (const key of talk.listening) removeItem(key);
      talk.listening.clear();
      talk.serverPaused = true;
      break;
    case "openrealtime.input.resumed":
      talk.serverPaused = false;
      break;
    case "openrealtime.memory.status":
      // Long-term memory learned (or failed to learn) from what was just said.
      if (event.status === "saved") notice("Remembered for this role — see the Memory page.");
      else if (event.status === "limit_reached") notice("Long-term memory is full for this role; tidy it on the Memory page.", "warn");
      else if (event.status === "failed") notice("Long-term memory could not be updated; check the Memory page.", "warn");
      break;
    case "error":
      if (event.error.code === "journal_unavailable") notice(event.error.message, "warn");
      else if (event.error.code !== "input_audio_buffer_commit_empty") notice(`${event.error.message} (${event.error.code})`, "warn");
      break;
    case "openrealtime.journal.recovered":
      notice("");
      break;
    case "openrealtime.thread_memory.updated":
      if (talk.threadMemory) talk.threadMemory.live(event);
      break;
    default:
      break;
  }
}

/**
 * After a resume the server could not replay (continued from the journal on another process,
 * or the replay window was exceeded): drop half-played audio and show this session's turns as
 * the journal has them instead of what the page had; the page record follows. Keys get a new
 * prefix, so generation numbers the server hands out from now on never collide with old ones.
 */
async function reconcile(account) {
  if (talk.player) await talk.player.clear();
  talk.interrupted = new Set();
  talk.reported = {};
  for (const [key, node] of [...talk.items]) {
    if (key.startsWith(`${talk.keyPrefix}:`)) {
      node.remove();
      talk.items.delete(key);
    }
  }
  talk.epoch = (talk.epoch || 0) + 1;
  talk.keyPrefix = `${talk.session.id}~${talk.epoch}`;
  const at = new Date().toISOString();
  const messages = [];
  for (const item of account.items) {
    const key = `${talk.keyPrefix}:j${item.journal_seq}`;
    showItem(key, item.role, item.text);
    if (item.interrupted) noteItem(key, "interrupted — only the part you heard is kept");
    messages.push({ role: item.role, text: item.text, at });
  }
  const { record, saver } = talk;
  const start = talk.sessionStart;
  talk.recording = talk.recording.then(async () => {
    // A cut list (complete: false) holds only the latest turns: replace just as many.
    const from = account.complete ? start : Math.max(start, record.messages.length - messages.length);
    await saver.replaceFrom(record.id, from, messages);
  });
  $("playback").textContent = "Resumed; the transcript was brought up to date";
  talk.threadMemory.reload(); // memory updates in the range the server gave up are missed too
}

function onAudio({ generation, pcm }) {
  if (talk.interrupted.has(generation) || !talk.player) return;
  if (!(generation in talk.audioMs)) keepLatest(talk.audioMs);
  talk.audioMs[generation] = (talk.audioMs[generation] || 0) + (pcm.length * 1000) / talk.player.sampleRate;
  talk.indicator.signal("audio");
  talk.player.push(generation, pcm);
}

/** Bound a generation → fact object before a new entry: drop the oldest generations. */
function keepLatest(byGeneration) {
  const generations = Object.keys(byGeneration).map(Number).sort((a, b) => a - b);
  for (const generation of generations.slice(0, Math.max(0, generations.length - TURNS_KEPT + 1))) {
    delete byGeneration[generation];
  }
}

/** Under an interrupted answer: how much of it was heard (timeline.js rule 4). */
function showHeard(key, response) {
  const cut = talk.interruptions[response.generation];
  const played = cut && cut.played_ms !== null && talk.player;
  markHeard(talk.items.get(key), {
    heardMs: played ? cut.played_ms : null,
    totalMs: played ? talk.audioMs[response.generation] || 0 : null,
    heardTextValue: response.heard_text || "",
    fullText: response.output_text || "",
  });
}

/** Barge-in: clear playback at once, then tell the server how much of the answer was heard.
 * Over WebRTC the server stopped the audio itself and knows what was played: nothing to do. */
async function interrupt(generation, reason) {
  talk.interrupted.add(generation);
  if (!talk.player) {
    talk.lastInterruption = { generation, reason, played_ms: null, clear_ms: 0 };
    talk.interruptions[generation] = talk.lastInterruption;
    $("playback").textContent = `Interrupted (${reason})`;
    noteItem(`${talk.keyPrefix}:g${generation}`, interruptionNote(generation));
    return;
  }
  const at = performance.now();
  const played = await talk.player.clear();
  const playedMs = ((played[generation] || 0) * 1000) / talk.player.sampleRate;
  if (talk.conn) talk.conn.reportPlayback(generation, playedMs);
  talk.playbackReports.push({ generation, played_ms: playedMs, final: true });
  talk.lastInterruption = { generation, reason, played_ms: Math.round(playedMs), clear_ms: performance.now() - at };
  talk.interruptions[generation] = talk.lastInterruption;
  $("playback").textContent = `Interrupted (${reason}) — played ${Math.round(playedMs)} ms of the answer`;
  noteItem(`${talk.keyPrefix}:g${generation}`, interruptionNote(generation));
  const node = talk.items.get(`${talk.keyPrefix}:g${generation}`);
  if (node && node.querySelector(".heard")) { // response.done came first: now we know the time
    markHeard(node, { heardMs: talk.lastInterruption.played_ms, totalMs: talk.audioMs[generation] || 0 });
  }
}

function interruptionNote(generation) {
  const cut = talk.interruptions[generation];
  const played = cut && cut.played_ms !== null ? ` after ${cut.played_ms} ms of playback` : "";
  return `interrupted${played} — only the part you heard is kept`;
}

function onPlaybackProgress(progress) {
  if (!talk.conn) return;
  const now = performance.now();
  if (now - (talk.lastReportAt || 0) >= PLAYBACK_REPORT_MS) {
    talk.lastReportAt = now;
    for (const [gen, samples] of Object.entries(progress.played)) {
      const generation = Number(gen);
      if (talk.interrupted.has(generation) || talk.reported[gen] === samples) continue;
      talk.reported[gen] = samples;
      talk.conn.reportPlayback(generation, (samples * 1000) / talk.player.sampleRate);
    }
  }
  if (progress.state === "playing") {
    $("playback").textContent = `Playing · ${Math.round((progress.buffered * 1000) / talk.player.sampleRate)} ms buffered`;
  }
}

function onPlaybackDrained(generation, playedMs) {
  if (talk.interrupted.has(generation) || !talk.conn) return;
  talk.indicator.signal("drained");
  talk.conn.reportPlayback(generation, playedMs);
  talk.playbackReports.push({ generation, played_ms: playedMs, final: true });
  $("playback").textContent = `Played ${Math.round(playedMs)} ms`;
}

async function startMicrophone() {
  if (talk.mic) return;
  const mic = new Microphone((pcm) => {
    if (talk.conn) talk.conn.sendAudio(pcm);
  }, { onLevel: (level) => talk.meter.update(level) });
  try {
    await mic.start();
    talk.mic = mic;
    mic.setPaused(talk.micPaused);
  } catch (error) {
    notice(`Microphone unavailable (${errorText(error)}): you can type instead.`, "warn");
  }
}

async function stopSession() {
  const { conn, mic, player } = talk;
  talk.conn = null;
  talk.session = null;
  if (talk.approvals) talk.approvals.clear();
  if (conn) conn.close();
  if (mic) await mic.stop().catch(() => {});
  if (player) await player.stop().catch(() => {});
  $("remote-audio").srcObject = null;
  talk.mic = null;
  talk.player = null;
  talk.interrupted = new Set();
  talk.reported = {};
  talk.generations.clear();
  talk.serverPaused = false;
  talk.listening.clear();
  talk.audioMs = {};
  talk.latency = {};
  talk.meter.reset();
  setConnection("idle");
}

/** Open a session: new thread, or a continuation of the record's thread. */
async function startSession({ continueThread }) {
  const record = talk.record;
  const options = continueThread
    ? {
      requestedThreadId: record.thread_id,
      previousVoiceSessionId: record.voice_session_id,
      role: record.role_id,
    }
    : { role: $("role").value };
  // The microphone first: a WebRTC offer carries its track.
  await startMicrophone();
  const conn = new RealtimeConnection({
    url: realtimeUrl(),
    token: token(),
    microphone: () => (talk.mic ? talk.mic.track() : null),
  });
  talk.conn = conn;
  conn.addEventListener("state", (e) => {
    if (conn !== talk.conn) return;
    setConnection(e.detail.state, e.detail);
    if (e.detail.state === "lost") onSessionLost(e.detail.reason);
    if (e.detail.reconcile) reconcile(e.detail.reconcile);
  });
  conn.addEventListener("event", (e) => conn === talk.conn && onEvent(e.detail));
  conn.addEventListener("audio", (e) => conn === talk.conn && onAudio(e.detail));
  conn.addEventListener("remote-audio", (e) => {
    if (conn !== talk.conn) return;
    const audio = $("remote-audio");
    audio.srcObject = e.detail;
    audio.play().catch(() => {}); // autoplay: the Start click is the user's gesture
  });
  let session;
  try {
    session = await conn.start(options);
  } catch (error) {
    talk.conn = null;
    if (talk.mic) await talk.mic.stop().catch(() => {});
    talk.mic = null;
    const why = error.code === "previous_session_not_in_thread" || error.code === "thread_not_found"
      ? "This conversation can no longer be continued (its runtime history is gone)."
      : "Could not start a session.";
    notice(`${why} ${error.message} (${error.code})`, "bad");
    setConnection("failed", { code: error.code });
    return false;
  }
  talk.session = session;
  talk.keyPrefix = session.id;
  talk.sessionStart = record.messages.length; // this session's messages start here
  talk.sessionJournaled = false;
  talk.continuing = Boolean(continueThread);
  const ids = { thread_id: session.thread_id, role_id: session.role.id };
  if (talk.saver.records.has(record.id)) await talk.saver.update(record.id, ids);
  else await talk.saver.track(Object.assign(record, ids));
  if (conn.carriesAudio) {
    const player = new Player(session.output_sample_rate, {
      onProgress: onPlaybackProgress,
      onDrained: onPlaybackDrained,
    });
    try {
      await player.start();
      talk.player = player;
    } catch (error) {
      notice(`Audio playback unavailable: ${errorText(error)}`, "warn");
    }
  }
  // A microphone paused in an earlier session stays paused; the new session hears of it too.
  if (talk.micPaused) conn.sendJson({ type: "openrealtime.input.pause" });
  setConnection(conn.state);
  talk.threadMemory.open(session.thread_id);
  $("new-conversation").disabled = false;
  $("role").disabled = true; // a conversation keeps its role; "New conversation" picks again
  $("start").textContent = "End";
  return true;
}

function onSessionLost(reason) {
  // The server no longer holds the session (restart, expiry): continue its thread instead.
  const record = talk.record;
  if (record.thread_id && record.voice_session_id) {
    notice(`The session ended on the server (${reason}); continuing the conversation in a new session.`, "warn");
    divider("— continued in a new session —");
    stopSession().then(() => startSession({ continueThread: true }));
  } else {
    notice(`The session ended on the server (${reason}). Start again to go on.`, "warn");
    stopSession();
    $("start").textContent = "Start";
  }
}

async function onStartClick() {
  if (talk.conn) {
    await stopSession();
    $("start").textContent = talk.record.thread_id && talk.record.voice_session_id ? "Continue" : "Start";
    return;
  }
  notice("");
  $("start").disabled = true;
  const continueThread = Boolean(talk.record.thread_id && talk.record.voice_session_id);
  if (continueThread && talk.items.size) divider("— continued —");
  await startSession({ continueThread });
  $("start").disabled = false;
}

async function onNewConversation() {
  await stopSession();
  talk.record = newRecord();
  clearTranscript();
  talk.threadMemory.open(null);
  talk.recording = Promise.resolve();
  history.replaceState(null, "", location.pathname);
  $("role").disabled = false;
  $("conversation-title").textContent = "Conversation";
  $("save-state").textContent = "";
  $("save-problem").classList.add("hidden");
  $("start").textContent = "Start";
  $("new-conversation").disabled = true;
  notice("New conversation: pick a role and press Start.");
}

function onMicToggle() {
  talk.micPaused = !talk.micPaused;
  if (talk.mic) talk.mic.setPaused(talk.micPaused);
  if (talk.conn) talk.conn.sendJson({ type: talk.micPaused ? "openrealtime.input.pause" : "openrealtime.input.resume" });
  $("mic").textContent = talk.micPaused ? "Resume microphone" : "Pause microphone";
  $("mic").setAttribute("aria-pressed", String(talk.micPaused));
  $("mic-state").classList.toggle("hidden", !talk.micPaused);
  talk.meter.reset();
  talk.indicator.signal(talk.micPaused ? "pause" : "resume");
  $("level").parentElement.classList.toggle("hidden", talk.micPaused); // no level to show
}

function onType(event) {
  event.preventDefault();
  const text = $("type-text").value.trim();
  if (!text || !talk.conn) return;
  $("type-text").value = "";
  const key = `${talk.keyPrefix}:t:${crypto.randomUUID()}`;
  showItem(key, "user", text);
  talk.conn.sendText(text);
  talk.indicator.signal("typed");
  talk.threadMemory.conversationMoved();
  recordMessage("user", text);
}

// ------------------------------------------------------------------ loading

async function loadContinuation(recordId) {
  let saved;
  try {
    saved = await api(`/api/conversations/${encodeURIComponent(recordId)}`);
  } catch (error) {
    notice(`Could not open that conversation: ${errorText(error)}`, "bad");
    return;
  }
  $("conversation-title").textContent = `Continuing: ${saved.title || "untitled conversation"}`;
  if (!saved.continuable) {
    notice(`View only: ${saved.view_only_reason || "this conversation cannot be continued"}.`, "warn");
    $("start").disabled = true;
  }
  const local = await talk.saver.localSnapshot(recordId);
  const messages = local && local.messages.length >= saved.messages.length
    ? local.messages
    : saved.messages.map((m) => ({ role: m.role, text: m.text, at: m.at }));
  messages.forEach((m, index) => showItem(`rec:${index}`, m.role, m.text, { earlier: true }));
  talk.record = local && local.version >= saved.version
    ? local
    : newRecord({
      id: saved.id,
      messages,
      version: saved.version,
      confirmed: saved.message_count,
      thread_id: saved.thread_id,
      voice_session_id: saved.voice_session_id,
      role_id: saved.role_id,
      title: saved.title || "",
    });
  if (saved.role_id) $("role").value = saved.role_id;
  $("role").disabled = true;
  if (saved.continuable) $("start").textContent = "Continue";
  if (saved.thread_id) talk.threadMemory.open(saved.thread_id);
  await talk.saver.track(talk.record);
}

async function main() {
  let who;
  try {
    who = await signedIn("index.html");
  } catch (error) {
    notice(`Server unreachable: ${errorText(error)}`, "bad");
    return;
  }
  if (!who) return;
  talk.account = `${who.tenant}/${who.user}`;
  talk.saver = new RecordSaver(talk.account);
  talk.threadMemory = new ThreadMemoryPanel($("thread-memory"));
  talk.meter = new LevelMeter($("level-meter"));
  talk.indicator = new TurnIndicator($("turn-state"));
  const approvals = el("div", { id: "approvals", class: "approvals hidden", "aria-live": "polite" });
  $("transcript").before(approvals);
  talk.approvals = new ApprovalPanel(approvals, (message) => Boolean(talk.conn && talk.conn.sendJson(message)));
  talk.saver.addEventListener("status", (e) => showSaveStatus(e.detail));
  talk.saver.addEventListener("storage-error", (e) =>
    notice(`This browser cannot keep unsaved messages (${e.detail}); saving to the server still works.`, "warn"),
  );
  const roles = await listRoles();
  for (const role of roles) {
    const option = el("option", { value: role.id }, role.name);
    if (role.is_default) option.selected = true;
    $("role").append(option);
  }
  const continueId = new URLSearchParams(location.search).get("continue");
  if (continueId) await loadContinuation(continueId);
  else talk.record = newRecord();
  $("start").addEventListener("click", onStartClick);
  $("new-conversation").addEventListener("click", onNewConversation);
  $("mic").addEventListener("click", onMicToggle);
  $("type-form").addEventListener("submit", onType);
  $("export-record").addEventListener("click", () => {
    const snapshot = talk.saver.records.get(talk.record.id)?.snapshot || talk.record;
    downloadJson(`conversation-${snapshot.id}.json`, snapshot);
  });
  $("discard-record").addEventListener("click", async () => {
    await talk.saver.discard(talk.record.id);
    $("save-problem").classList.add("hidden");
    $("save-state").textContent = "local copy discarded";
  });
  // Leaving ends the session: its resume token lives only in this page, so nothing could
  // resume it, and a session left waiting would keep its thread busy (RES-2 continues it).
  window.addEventListener("pagehide", () => {
    if (talk.conn) talk.conn.close();
  });
  window.addEventListener("pageshow", (event) => {
    if (event.persisted) location.reload(); // back from the page cache: the session was closed
  });
  // Snapshots an earlier visit could not send: retry them now (CONV-3).
  talk.resumed = await talk.saver.resumePending();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
