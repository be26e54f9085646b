// The realtime WebSocket client (docs/protocol.md), the browser twin of runtime/client.py: the
// OpenAI Realtime GA protocol with every `openrealtime.*` extension on.
//
// Theory of operation
// -------------------
// States: idle → connecting → connected ⇄ reconnecting → closed | failed.
// Every socket offers the `openrealtime` subprotocol: its first message opens the session.
// `start()` sends `openrealtime.session.start` (built by `sessionStartMessage`, the one place
// that says what this client negotiates; the bearer token goes in that first message, never in
// the URL) and resolves with our session facts, `session.created`.session.openrealtime (id,
// thread_id, role, sample rates, limits); the GA session object itself is kept as `config`.
// Every server message carries a `seq` (JSON field, or the 12-byte audio header); a message at
// or below the last seen seq is a replay duplicate and is dropped, so a resume never shows
// anything twice. Acks go out every ACK_EVERY messages and on a timer.
// When the socket drops for a recoverable reason, the client reconnects with backoff and sends
// `openrealtime.session.resume` (session id, resume token, last seq); the answer rotates the
// resume token, which lives only in this object's memory (never persisted: a reload starts a
// continuation, not a resume). When the server could not replay everything (the session was
// continued from the journal by another process, or the replay window was exceeded) the
// "connected" state carries `reconcile`: the session's turns as the journal has them, for the
// page to show instead. If the server refuses the resume (`resume_refused`, `thread_not_found`,
// `role_not_found`) the client reports "lost" so the page can continue the thread in a new
// session instead.

export const ACK_EVERY = 32;
const ACK_INTERVAL_MS = 500;
const RESUME_GIVE_UP_MS = 170_000; // the server keeps a dropped session for resume_ttl_s (180 s)
const FINAL_CLOSE_CODES = new Set([1000, 4001, 4003, 4012, 4013]);
const SUBPROTOCOL = "openrealtime"; // "my first message opens (or resumes) the session"
const INPUT_SAMPLE_RATE = 16000; // what audio.js's Microphone captures
const OUTPUT_SAMPLE_RATE = 24000;

/**
 * The first message of a new session: `openrealtime.session.start` with every extension on
 * and the audio formats this page speaks. `role` is a role id (the tenant's default when
 * omitted); `requestedThreadId` + `previousVoiceSessionId` continue a thread; `pushToTalk`
 * turns server turn detection off (the page then commits the input buffer itself).
 */
export function sessionStartMessage({
  token,
  role,
  requestedThreadId,
  previousVoiceSessionId,
  pushToTalk = false,
}) {
  const message = {
    type: "openrealtime.session.start",
    token,
    extensions: { events: true, seq: true, binary_audio: true, pause_playback: true },
    session: {
      audio: {
        input: {
          format: { type: "audio/pcm", rate: INPUT_SAMPLE_RATE },
          turn_detection: pushToTalk ? null : { type: "server_vad" },
        },
        output: { format: { type: "audio/pcm", rate: OUTPUT_SAMPLE_RATE } },
      },
    },
  };
  if (role) message.model = role;
  if (requestedThreadId) message.requested_thread_id = requestedThreadId;
  if (previousVoiceSessionId) message.previous_voice_session_id = previousVoiceSessionId;
  return message;
}

/** Our facts of a GA session object (its `openrealtime`), without the resume token: that
 * lives only in the connection (`_resumeToken`). */
function sessionFacts(session) {
  const { resume_token: _, ...facts } = (session && session.openrealtime) || {};
  return facts;
}

function protocolError(error) {
  return Object.assign(new Error(error.message), { code: error.code });
}

export class RealtimeConnection extends EventTarget {
  constructor({ url, token }) {
    super();
    this.url = url;
    this.token = token;
    this.state = "idle";
    this.session = null; // our facts: id, thread_id, role {id, name}, sample rates, limits
    this.config = null; // the GA session object of session.created
    this.limits = null;
    this.lastSeq = 0;
    this.resumes = 0;
    this.sent = []; // control messages sent (for the page's diagnostics and tests), bounded
    this._resumeToken = "";
    this._acked = 0;
    this._ws = null;
    this._closing = false;
    this._ackTimer = null;
    this._droppedAt = 0;
  }

  /**
   * Open a session (`options` as `sessionStartMessage` takes them, without the token);
   * resolves with our session facts, rejects with the server's error (`.code`).
   */
  start(options = {}) {
    const start = sessionStartMessage({ ...options, token: this.token });
    this._closing = false;
    this._setState("connecting");
    return new Promise((resolve, reject) => {
      const ws = this._open();
      let settled = false;
      ws.onopen = () => this._sendJson(start);
      ws.onmessage = (message) => {
        if (!settled && typeof message.data === "string") {
          const event = JSON.parse(message.data);
          if (event.type === "session.created") {
            settled = true;
            this.config = event.session;
            this.session = sessionFacts(event.session);
            this.limits = this.session.limits || null;
            this._resumeToken = (event.session.openrealtime || {}).resume_token || "";
            this._setState("connected");
            resolve(this.session);
          } else if (event.type === "error") {
            settled = true;
            reject(protocolError(event.error));
          }
        }
        this._onMessage(message);
      };
      ws.onclose = (close) => {
        if (!settled) {
          settled = true;
          this._setState("failed");
          reject(Object.assign(new Error(`connection closed (${close.code})`), { code: "closed" }));
          return;
        }
        this._onClose(ws, close);
      };
    });
  }

  sendJson(message) {
    this._sendJson(message);
  }

  /** Send microphone PCM16 (ArrayBuffer); dropped while not connected. */
  sendAudio(buffer) {
    if (this.state === "connected" && this._ws && this._ws.readyState === WebSocket.OPEN) {
      this._ws.send(buffer);
    }
  }

  /** A typed user turn, answered: the item, then `response.create` (an item alone is not). */
  sendText(text) {
    this._sendJson({
      type: "conversation.item.create",
      item: { type: "message", role: "user", content: [{ type: "input_text", text }] },
    });
    this._sendJson({ type: "response.create" });
  }

  reportPlayback(generation, playedMs) {
    this._sendJson({ type: "openrealtime.playback", generation, played_ms: Math.max(0, Math.round(playedMs)) });
  }

  /** End the session for good (openrealtime.session.close; it cannot be resumed). */
  close() {
    this._closing = true;
    this._stopAckTimer();
    if (this._ws && this._ws.readyState === WebSocket.OPEN) {
      this._sendJson({ type: "openrealtime.session.close" });
    }
    if (this._ws) this._ws.close(1000);
    this._ws = null;
    this._setState("closed");
  }

  /** Cut the socket as a network failure would (the session lives on; we resume). */
  drop() {
    if (this._ws) this._ws.close(4000, "dropped");
  }

  // ------------------------------------------------------------------ internals

  _open() {
    const ws = new WebSocket(this.url, [SUBPROTOCOL]);
    ws.binaryType = "arraybuffer";
    this._ws = ws;
    this._startAckTimer();
    return ws;
  }

  _sendJson(message) {
    if (!this._ws || this._ws.readyState !== WebSocket.OPEN) return false;
    this._ws.send(JSON.stringify(message));
    if (message.type !== "openrealtime.ack") {
      const logged = { ...message };
      delete logged.token;
      delete logged.resume_token;
      this.sent.push(logged);
      if (this.sent.length > 200) this.sent.shift();
    }
    return true;
  }

  _onMessage(message) {
    if (typeof message.data === "string") {
      const event = JSON.parse(message.data);
      const seq = Number(event.seq || 0);
      if (seq && seq <= this.lastSeq) return; // a replayed duplicate
      if (seq) this.lastSeq = seq;
      this._maybeAck();
      this.dispatchEvent(new CustomEvent("event", { detail: event }));
    } else {
      const view = new DataView(message.data);
      const seq = Number(view.getBigUint64(0, true));
      const generation = view.getUint32(8, true);
      if (seq <= this.lastSeq) return;
      this.lastSeq = seq;
      this._maybeAck();
      const pcm = new Int16Array(message.data.slice(12));
      this.dispatchEvent(new CustomEvent("audio", { detail: { seq, generation, pcm } }));
    }
  }

  _maybeAck(force = false) {
    if (this.lastSeq > this._acked && (force || this.lastSeq - this._acked >= ACK_EVERY)) {
      if (this._sendJson({ type: "openrealtime.ack", seq: this.lastSeq })) this._acked = this.lastSeq;
    }
  }

  _startAckTimer() {
    this._stopAckTimer();
    this._ackTimer = setInterval(() => this._maybeAck(true), ACK_INTERVAL_MS);
  }

  _stopAckTimer() {
    if (this._ackTimer) clearInterval(this._ackTimer);
    this._ackTimer = null;
  }

  _onClose(ws, close) {
    if (ws !== this._ws || this._closing) return;
    this._stopAckTimer();
    if (FINAL_CLOSE_CODES.has(close.code)) {
      this._setState(close.code === 1000 ? "closed" : "failed", { code: close.code });
      return;
    }
    this._droppedAt = this._droppedAt || Date.now();
    this._setState("reconnecting", { code: close.code });
    this._resumeLater(0);
  }

  _resumeLater(attempt) {
    const delay = attempt === 0 ? 0 : Math.min(5000, 250 * 2 ** (attempt - 1));
    setTimeout(() => this._tryResume(attempt), delay);
  }

  _tryResume(attempt) {
    if (this._closing) return;
    if (Date.now() - this._droppedAt > RESUME_GIVE_UP_MS) {
      this._lost("resume_timeout");
      return;
    }
    const ws = this._open();
    let answered = false;
    ws.onopen = () => {
      ws.send(
        JSON.stringify({
          type: "openrealtime.session.resume",
          token: this.token,
          session_id: this.session.id,
          resume_token: this._resumeToken,
          last_seq: this.lastSeq,
        }),
      );
    };
    ws.onmessage = (message) => {
      if (!answered) {
        answered = true;
        const first = typeof message.data === "string" ? JSON.parse(message.data) : {};
        if (first.type === "openrealtime.session.resumed") {
          this._resumeToken = first.resume_token;
          this._droppedAt = 0;
          this.resumes += 1;
          // Continued from the journal (another process, a restart): same id, fresh details.
          if (first.session) {
            this.config = first.session;
            this.session = { ...this.session, ...sessionFacts(first.session) };
            this.limits = this.session.limits || this.limits;
          }
          this._setState("connected", {
            resumed: true,
            replayed: first.replayed,
            missing: first.missing,
            reconcile: first.reconcile || null,
          });
          return;
        }
        const code = (first.error && first.error.code) || "resume_failed";
        this._lost(code);
        return;
      }
      this._onMessage(message);
    };
    ws.onclose = (close) => {
      if (ws !== this._ws || this._closing) return;
      if (!answered) {
        if (FINAL_CLOSE_CODES.has(close.code) && close.code !== 4003) {
          this._setState("failed", { code: close.code });
          return;
        }
        if (this.state === "reconnecting") this._resumeLater(attempt + 1);
        return;
      }
      this._onClose(ws, close);
    };
  }

  _lost(reason) {
    this._closing = true;
    this._stopAckTimer();
    if (this._ws) this._ws.close(1000);
    this._ws = null;
    this._setState("lost", { reason });
  }

  _setState(state, detail = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...detail } }));
  }
}

export function realtimeUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/realtime`;
}
