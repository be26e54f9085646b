// The talk page's conversation as data: no DOM, no network, no audio (issue 34 item 5).
//
// Theory of operation
// -------------------
// Rule 1. `reduce(state, event)` is the only way the conversation changes. It takes the state
//         and one event — a server event (GA or `openrealtime.*`), or one of the page's own
//         (`page.*`, below) — and returns `{ state, effects }`: a new state (the one given is
//         never changed; collections that changed are copied) and the effects the page must
//         carry out (talk.js renders the entries and runs the effects). The same state and
//         event give the same result.
// Rule 2. State: `entries` — the transcript in display order, key → `{ role, text, partial,
//         earlier, note }` (`role` "user", "assistant" or "divider"); `generations` — response
//         id → generation while a response runs; `listening` — keys of user speech not
//         committed yet (a pause drops them); `serverPaused`; `outputAudio` — the last 200
//         `output_audio_buffer.*` events over WebRTC; `prefix` — the keys of the current
//         session (its id, then `~epoch` after each reconcile).
// Rule 3. Keys: a spoken user item `${prefix}:u:${item_id}`, a typed one `${prefix}:t:${id}`, an
//         answer `${prefix}:g${generation}`, a reconciled journal item `${prefix}:j${seq}`, an
//         earlier message of a continued record `rec:${index}`. A new session's generation 1
//         never overwrites an old session's message.
// Rule 4. Effects (`kind`): `record` (a final message for the page record: role, text),
//         `player` (action end | pause | resume, generation), `interrupted` (generation,
//         reason: clear playback and report what was heard), `heard` (key, response: an
//         interrupted answer's "heard N of M"), `playback` (text for the status line),
//         `latency` (generation, key, event), `notice` (text, level), `thread-memory`
//         (event), `moved` (the thread's head moved on).
// Rule 5. Page events: `page.session` (prefix: a session started), `page.stopped`,
//         `page.typed` (key, text), `page.note` (key, text), `page.earlier` (messages),
//         `page.divider` (text), `page.cleared`, `page.reconciled` (session id, items).

export const OUTPUT_AUDIO_KEPT = 200;

const MOVES_THE_THREAD = new Set(["response.created", "response.done", "input_audio_buffer.committed"]);
const PLAYBACK_LABELS = {
  "output_audio_buffer.started": "Playing",
  "output_audio_buffer.stopped": "Played",
  "output_audio_buffer.cleared": "Playback cleared",
};
export const HEARD_NOTE = "interrupted — only the part you heard is kept";

/** The state of a page that has shown nothing yet (rule 2). */
export function initialState() {
  return {
    prefix: "pending",
    epoch: 0,
    dividers: 0,
    entries: new Map(),
    generations: new Map(),
    listening: new Set(),
    serverPaused: false,
    outputAudio: [],
  };
}

/** Rule 1: the next state and the effects of `event`. */
export function reduce(state, event) {
  const step = new Step(state);
  if (MOVES_THE_THREAD.has(event.type)) step.effect({ kind: "moved" }); // a turn was journaled
  const handle = HANDLERS[event.type];
  if (handle) handle(step, event);
  return { state: step.state, effects: step.effects };
}

/** One reduction: copies a collection the first time it changes (rule 1). */
class Step {
  constructor(state) {
    this.state = { ...state };
    this.effects = [];
    this.copied = new Set();
  }

  effect(effect) {
    this.effects.push(effect);
  }

  mutable(name) {
    if (!this.copied.has(name)) {
      const value = this.state[name];
      this.state[name] = value instanceof Map ? new Map(value) : value instanceof Set ? new Set(value) : [...value];
      this.copied.add(name);
    }
    return this.state[name];
  }

  show(key, role, text, { partial = false, earlier = false } = {}) {
    const entries = this.mutable("entries");
    const before = entries.get(key);
    entries.set(key, { role, text, partial, earlier, note: before ? before.note : "" });
  }

  note(key, text) {
    const before = this.state.entries.get(key);
    if (!before) return;
    this.mutable("entries").set(key, { ...before, note: text });
  }

  remove(key) {
    if (this.state.entries.has(key)) this.mutable("entries").delete(key);
  }

  userKey(event) {
    return `${this.state.prefix}:u:${event.item_id}`;
  }

  answerKey(generation) {
    return `${this.state.prefix}:g${generation}`;
  }
}

const HANDLERS = {
  "input_audio_buffer.speech_started"(step, event) {
    const key = step.userKey(event);
    step.show(key, "user", "…", { partial: true });
    step.mutable("listening").add(key);
  },
  "input_audio_buffer.committed"(step, event) {
    const key = step.userKey(event);
    if (step.state.listening.has(key)) step.mutable("listening").delete(key);
    if (step.state.entries.has(key)) step.show(key, "user", "… (transcribing)", { partial: true });
  },
  "conversation.item.input_audio_transcription.delta"(step, event) {
    // A partial transcript of long speech (every few seconds while the person talks).
    const text = (event.transcript || "").trim();
    if (text) step.show(step.userKey(event), "user", `${text} …`, { partial: true });
  },
  "conversation.item.input_audio_transcription.completed"(step, event) {
    const key = step.userKey(event);
    const text = (event.transcript || "").trim();
    if (!text) {
      step.remove(key);
      return;
    }
    step.show(key, "user", text);
    step.effect({ kind: "record", role: "user", text });
  },
  "response.created"(step, event) {
    const { generation, id } = event.response;
    step.mutable("generations").set(id, generation);
    step.show(step.answerKey(generation), "assistant", "…", { partial: true });
  },
  "response.output_audio_transcript.delta": answerDelta,
  "response.output_text.delta": answerDelta,
  "response.output_audio.done"(step, event) {
    const generation = step.state.generations.get(event.response_id);
    if (generation !== undefined) step.effect({ kind: "player", action: "end", generation });
  },
  "openrealtime.response.interrupted"(step, event) {
    step.effect({ kind: "interrupted", generation: event.generation, reason: event.reason });
  },
  "openrealtime.output_audio.paused"(step) { // sound over the answer: hold it
    step.effect({ kind: "player", action: "pause" });
  },
  "openrealtime.output_audio.resumed"(step) { // it was no real turn: play on
    step.effect({ kind: "player", action: "resume" });
  },
  "response.done"(step, event) {
    const response = event.response;
    if (step.state.generations.has(response.id)) step.mutable("generations").delete(response.id);
    const key = step.answerKey(response.generation);
    const text = ((response.interrupted ? response.heard_text : response.output_text) || "").trim();
    if (!text && !response.output_text) step.remove(key);
    else step.show(key, "assistant", text || "(interrupted before any was heard)");
    if (response.interrupted) step.effect({ kind: "heard", key, response });
    else if (response.status === "failed") step.note(key, "the answer failed; try again");
    // Out of band (no conversation_id: the recording notice) — heard, never kept in the record.
    if (response.conversation_id) step.effect({ kind: "record", role: "assistant", text });
    else if (text) step.note(key, "not part of the conversation");
  },
  "openrealtime.session.recording"(step, event) {
    const kept = event.retain_until ? ` (kept until ${new Date(event.retain_until).toLocaleDateString()})` : "";
    step.effect({ kind: "notice", text: `This conversation is recorded${kept}.`, level: "" });
  },
  "output_audio_buffer.started": outputAudio, // WebRTC: the server began playing an answer out
  "output_audio_buffer.stopped": outputAudio, // … played it to the end
  "output_audio_buffer.cleared": outputAudio, // … cut it (an interruption, or our clear)
  "openrealtime.turn.latency"(step, event) {
    step.effect({ kind: "latency", generation: event.generation, key: step.answerKey(event.generation), event });
  },
  "openrealtime.input.paused"(step) {
    // The server dropped speech it had not committed: it will never be transcribed.
    for (const key of step.state.listening) step.remove(key);
    step.state.listening = new Set();
    step.state.serverPaused = true;
  },
  "openrealtime.input.resumed"(step) {
    step.state.serverPaused = false;
  },
  "openrealtime.memory.status"(step, event) {
    // Long-term memory learned (or failed to learn) from what was just said.
    const notices = {
      saved: ["Remembered for this role — see the Memory page.", ""],
      limit_reached: ["Long-term memory is full for this role; tidy it on the Memory page.", "warn"],
      failed: ["Long-term memory could not be updated; check the Memory page.", "warn"],
    };
    const chosen = notices[event.status];
    if (chosen) step.effect({ kind: "notice", text: chosen[0], level: chosen[1] });
  },
  error(step, event) {
    const { code, message } = event.error;
    if (code === "journal_unavailable") step.effect({ kind: "notice", text: message, level: "warn" });
    else if (code !== "input_audio_buffer_commit_empty") {
      step.effect({ kind: "notice", text: `${message} (${code})`, level: "warn" });
    }
  },
  "openrealtime.journal.recovered"(step) {
    step.effect({ kind: "notice", text: "", level: "" });
  },
  "openrealtime.thread_memory.updated"(step, event) {
    step.effect({ kind: "thread-memory", event });
  },

  // ---------------------------------------------------------------- the page's own (rule 5)

  "page.session"(step, event) {
    Object.assign(step.state, { prefix: event.prefix, epoch: 0 });
    Object.assign(step.state, { generations: new Map(), listening: new Set(), serverPaused: false });
  },
  "page.stopped"(step) {
    Object.assign(step.state, { generations: new Map(), listening: new Set(), serverPaused: false });
  },
  "page.typed"(step, event) {
    step.show(event.key, "user", event.text);
    step.effect({ kind: "record", role: "user", text: event.text });
    step.effect({ kind: "moved" });
  },
  "page.note"(step, event) {
    step.note(event.key, event.text);
  },
  "page.earlier"(step, event) {
    event.messages.forEach((m, index) => step.show(`rec:${index}`, m.role, m.text, { earlier: true }));
  },
  "page.divider"(step, event) {
    step.state.dividers += 1;
    step.show(`divider:${step.state.dividers}`, "divider", event.text);
  },
  "page.cleared"(step) {
    step.state.entries = new Map();
    step.copied.add("entries");
  },
  "page.reconciled"(step, event) {
    // The server could not replay: this session's turns as the journal has them replace what
    // the page showed, under a new prefix (generations handed out from now on never collide).
    for (const key of [...step.state.entries.keys()]) {
      if (key.startsWith(`${step.state.prefix}:`)) step.remove(key);
    }
    step.state.epoch += 1;
    step.state.prefix = `${event.sessionId}~${step.state.epoch}`;
    for (const item of event.items) {
      const key = `${step.state.prefix}:j${item.journal_seq}`;
      step.show(key, item.role, item.text);
      if (item.interrupted) step.note(key, HEARD_NOTE);
    }
  },
};

function answerDelta(step, event) { // the answer's words (spoken, or text-only)
  const generation = step.state.generations.get(event.response_id);
  if (generation === undefined) return; // its start was in a range the server gave up
  const key = step.answerKey(generation);
  const before = step.state.entries.get(key);
  const text = before ? before.text.replace(/^…$/, "") : "";
  step.show(key, "assistant", text + event.delta, { partial: true });
}

function outputAudio(step, event) {
  const kept = step.mutable("outputAudio");
  kept.push({ type: event.type, response_id: event.response_id });
  if (kept.length > OUTPUT_AUDIO_KEPT) kept.shift();
  step.effect({ kind: "playback", text: PLAYBACK_LABELS[event.type] });
}
