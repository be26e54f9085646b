// The realtime client (docs/protocol.md), the browser twin of runtime/client.py: the OpenAI
// Realtime GA protocol with every `openrealtime.*` extension on, over WebRTC (webrtc.js) or a
// WebSocket (WebSocketTransport, below).
//
// Theory of operation
// -------------------
// States: idle → connecting → connected ⇄ reconnecting → closed | failed | lost.
// A transport moves the protocol's messages; this class is the protocol. `start()` tries the
// transports in order (WebRTC, then WebSocket) and keeps the first that opens: it falls back
// only when the failed one says another may succeed (`error.fallback`: no RTCPeerConnection, a
// network error, 404/5xx, no ICE in time), never after the server refused the credential or
// the session. `transport.kind` says which one the session uses; a resume uses the same kind.
// The first message opens the session: `openrealtime.session.start` (built by
// `sessionStartMessage`, the one place that says what this client negotiates; the bearer token
// goes in that message or the POST's header, never in a URL). `start()` resolves with our
// session facts, `session.created`.session.openrealtime (id, thread_id, role, sample rates,
// limits); the GA session object itself is kept as `config`.
// Every server message carries a `seq` (JSON field, or the 12-byte audio header of the
// WebSocket's binary frames); a message at or below the last seen seq is a replay duplicate
// and is dropped, so a resume never shows anything twice. Acks go out every ACK_EVERY
// messages and on a timer.
// Audio: over the WebSocket the microphone's PCM goes out as binary frames and the answer's
// audio comes back as `audio` events for the page's player, which reports what it played.
// Over WebRTC both are tracks (`remote-audio` gives the page the agent's stream): the server
// knows what it played out, so `sendAudio` and `reportPlayback` do nothing there.
// When the transport drops for a recoverable reason, the client reconnects with backoff and
// sends `openrealtime.session.resume` (session id, resume token, last seq) — over WebRTC as the
// body of a new offer; the answer rotates the resume token, which lives only in this object's
// memory (never persisted: a reload starts a continuation, not a resume). When the server
// could not replay everything (the session was continued from the journal by another process,
// or the replay window was exceeded) the "connected" state carries `reconcile`: the session's
// turns as the journal has them, for the page to show instead. If the server refuses the
// resume (`resume_refused`, `thread_not_found`, `role_not_found`) the client reports "lost" so
// the page can continue the thread in a new session instead.

import { apiBase } from "./api.js";
import { WebRTCTransport } from "./webrtc.js";

export const ACK_EVERY = 32;
const ACK_INTERVAL_MS = 500;
const RESUME_GIVE_UP_MS = 170_000; // the server keeps a dropped session for resume_ttl_s (180 s)
const FINAL_CLOSE_CODES = new Set([1000, 4001, 4003, 4012, 4013]);
const SUBPROTOCOL = "openrealtime"; // "my first message opens (or resumes) the session"
const INPUT_SAMPLE_RATE = 16000; // what audio.js's Microphone captures
const OUTPUT_SAMPLE_RATE = 24000;

export const TRANSPORTS = ["webrtc", "websocket"]; // the order start() tries them in

/**
 * The first message of a new session: `openrealtime.session.start` with every extension the
 * transport can use. Over a WebSocket: binary audio frames, playback pauses and the PCM
 * formats this page speaks. Over WebRTC the audio is Opus on tracks the server plays out
 * itself, so neither binary frames, nor pause_playback, nor formats. `role` is a role id (the
 * tenant's default when omitted); `requestedThreadId` + `previousVoiceSessionId` continue a
 * thread; `pushToTalk` turns server turn detection off (the page then commits the input
 * buffer itself).
 */
export function sessionStartMessage({
  token,
  role,
  requestedThreadId,
  previousVoiceSessionId,
  pushToTalk = false,
  transport = "websocket",
}) {
  const tracks = transport === "webrtc";
  const input = { turn_detection: pushToTalk ? null : { type: "server_vad" } };
  const audio = { input };
  if (!tracks) {
    input.format = { type: "audio/pcm", rate: INPUT_SAMPLE_RATE };
    audio.output = { format: { type: "audio/pcm", rate: OUTPUT_SAMPLE_RATE } };
  }
  const message = {
    type: "openrealtime.session.start",
    token,
    extensions: { events: true, seq: true, binary_audio: !tracks, pause_playback: !tracks },
    session: { audio },
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

/** The WebSocket transport: `openrealtime` subprotocol, first-message mode, binary audio. */
export class WebSocketTransport {
  kind = "websocket";
  carriesAudio = true;

  constructor({ url }) {
    this.url = url;
    this.onmessage = () => {};
    this.onclose = () => {};
    this.onaudiotrack = () => {};
    this._ws = null;
    this._closed = false;
  }

  isOpen() {
    return Boolean(this._ws && this._ws.readyState === WebSocket.OPEN);
  }

  /** Resolves once `first` is sent; rejects if the socket closes before it opens. */
  open(first) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url, [SUBPROTOCOL]);
      ws.binaryType = "arraybuffer";
      this._ws = ws;
      let opened = false;
      ws.onopen = () => {
        opened = true;
        ws.send(JSON.stringify(first));
        resolve();
      };
      ws.onmessage = (message) => this.onmessage(message.data);
      ws.onclose = (close) => {
        if (!opened) {
          const error = new Error(`connection closed (${close.code})`);
          reject(Object.assign(error, { code: "closed", status: 0, fallback: false }));
        } else if (!this._closed) {
          this.onclose({ code: close.code });
        }
      };
    });
  }

  send(text) {
    if (!this.isOpen()) return false;
    this._ws.send(text);
    return true;
  }

  sendBinary(buffer) {
    if (!this.isOpen()) return false;
    this._ws.send(buffer);
    return true;
  }

  /** Close for good: no `onclose` follows (a connect in progress still rejects). */
  close() {
    this._closed = true;
    if (this._ws) this._ws.close(1000);
  }

  /** Cut the socket as a network failure would (the session lives on; we resume). */
  drop() {
    if (this._ws) this._ws.close(4000, "dropped");
  }
}

export class RealtimeConnection extends EventTarget {
  /**
   * `microphone()`: the microphone's MediaStreamTrack (or null), for a WebRTC offer.
   * `transports`: the kinds to try, in order (TRANSPORTS by default).
   */
  constructor({ url, token, microphone = () => null, transports = TRANSPORTS }) {
    super();
    this.url = url;
    this.token = token;
    this.microphone = microphone;
    this.transports = transports;
    this.transport = null; // the one in use: .kind is "webrtc" or "websocket"
    this.fallback = null; // why an earlier transport was passed over ({kind, code, message})
    this.state = "idle";
    this.session = null; // our facts: id, thread_id, role {id, name}, sample rates, limits
    this.config = null; // the GA session object of session.created
    this.limits = null;
    this.lastSeq = 0;
    this.resumes = 0;
    this.sent = []; // control messages sent (for the page's diagnostics and tests), bounded
    this._resumeToken = "";
    this._acked = 0;
    this._closing = false;
    this._ackTimer = null;
    this._droppedAt = 0;
  }

  /** "webrtc" or "websocket" once a transport is chosen. */
  get kind() {
    return this.transport ? this.transport.kind : null;
  }

  /** Whether audio travels in messages (the page plays it and reports), not on tracks. */
  get carriesAudio() {
    return Boolean(this.transport && this.transport.carriesAudio);
  }

  /**
   * Open a session (`options` as `sessionStartMessage` takes them, without the token and the
   * transport); resolves with our session facts, rejects with the server's error (`.code`).
   */
  async start(options = {}) {
    this._closing = false;
    this._setState("connecting");
    for (const [index, kind] of this.transports.entries()) {
      const transport = this._transportOf(kind);
      try {
        return await this._startOn(transport, sessionStartMessage({ ...options, token: this.token, transport: kind }));
      } catch (error) {
        transport.close();
        const last = index === this.transports.length - 1;
        if (this._closing || last || !error.fallback) {
          if (!this._closing) this._setState("failed", { code: error.code });
          throw error;
        }
        this.fallback = { kind, code: error.code, message: error.message };
      }
    }
    throw new Error("no transport to try");
  }

  sendJson(message) {
    this._sendJson(message);
  }

  /** Send microphone PCM16 (ArrayBuffer) over a WebSocket; dropped while not connected, and
   * over WebRTC, where the microphone is a track. */
  sendAudio(buffer) {
    if (this.state === "connected" && this.carriesAudio) this.transport.sendBinary(buffer);
  }

  /** A typed user turn, answered: the item, then `response.create` (an item alone is not). */
  sendText(text) {
    this._sendJson({
      type: "conversation.item.create",
      item: { type: "message", role: "user", content: [{ type: "input_text", text }] },
    });
    this._sendJson({ type: "response.create" });
  }

  /** How much of a response the page played (WebSocket only: over WebRTC the server knows). */
  reportPlayback(generation, playedMs) {
    if (!this.carriesAudio) return;
    this._sendJson({ type: "openrealtime.playback", generation, played_ms: Math.max(0, Math.round(playedMs)) });
  }

  /** End the session for good (openrealtime.session.close; it cannot be resumed). */
  close() {
    this._closing = true;
    this._stopAckTimer();
    if (this.transport) {
      this._sendJson({ type: "openrealtime.session.close" });
      this.transport.close();
    }
    this._setState("closed");
  }

  /** Cut the transport as a network failure would (the session lives on; we resume). */
  drop() {
    if (this.transport) this.transport.drop();
  }

  // ------------------------------------------------------------------ internals

  _transportOf(kind) {
    const transport = kind === "webrtc"
      ? new WebRTCTransport({ token: this.token, track: this.microphone() })
      : new WebSocketTransport({ url: this.url });
    transport.onaudiotrack = (stream) => {
      if (transport === this.transport) this.dispatchEvent(new CustomEvent("remote-audio", { detail: stream }));
    };
    return transport;
  }

  /** Open `transport` with `start` and wait for `session.created` (or the server's error). */
  _startOn(transport, start) {
    this.transport = transport;
    return new Promise((resolve, reject) => {
      let settled = false;
      transport.onmessage = (data) => {
        if (!settled && typeof data === "string") {
          const event = JSON.parse(data);
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
        this._onMessage(data);
      };
      transport.onclose = (close) => {
        if (!settled) {
          settled = true;
          const error = new Error(`connection closed (${close.code})`);
          reject(Object.assign(error, { code: "closed", fallback: false }));
          return;
        }
        this._onClose(transport, close);
      };
      transport.open(start).then(() => this._startAckTimer(), (error) => {
        if (!settled) {
          settled = true;
          reject(error);
        }
      });
    });
  }

  _sendJson(message) {
    if (!this.transport || !this.transport.send(JSON.stringify(message))) return false;
    if (message.type !== "openrealtime.ack") {
      const logged = { ...message };
      delete logged.token;
      delete logged.resume_token;
      this.sent.push(logged);
      if (this.sent.length > 200) this.sent.shift();
    }
    return true;
  }

  _onMessage(data) {
    if (typeof data === "string") {
      const event = JSON.parse(data);
      const seq = Number(event.seq || 0);
      if (seq && seq <= this.lastSeq) return; // a replayed duplicate
      if (seq) this.lastSeq = seq;
      this._maybeAck();
      this.dispatchEvent(new CustomEvent("event", { detail: event }));
    } else {
      const view = new DataView(data);
      const seq = Number(view.getBigUint64(0, true));
      const generation = view.getUint32(8, true);
      if (seq <= this.lastSeq) return;
      this.lastSeq = seq;
      this._maybeAck();
      const pcm = new Int16Array(data.slice(12));
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

  _onClose(transport, close) {
    if (transport !== this.transport || this._closing) return;
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
    const transport = this._transportOf(this.transport.kind);
    this.transport = transport;
    let answered = false;
    const retry = () => {
      if (this.state === "reconnecting") this._resumeLater(attempt + 1);
    };
    transport.onmessage = (data) => {
      if (!answered) {
        answered = true;
        const first = typeof data === "string" ? JSON.parse(data) : {};
        if (first.type === "openrealtime.session.resumed") {
          this._resumed(first);
          return;
        }
        const code = (first.error && first.error.code) || "resume_failed";
        this._lost(code);
        return;
      }
      this._onMessage(data);
    };
    transport.onclose = (close) => {
      if (transport !== this.transport || this._closing) return;
      if (!answered) {
        if (FINAL_CLOSE_CODES.has(close.code) && close.code !== 4003) {
          this._setState("failed", { code: close.code });
          return;
        }
        retry();
        return;
      }
      this._onClose(transport, close);
    };
    const resume = {
      type: "openrealtime.session.resume",
      token: this.token,
      session_id: this.session.id,
      resume_token: this._resumeToken,
      last_seq: this.lastSeq,
    };
    transport.open(resume).then(() => this._startAckTimer(), (error) => {
      if (transport !== this.transport || this._closing) return;
      // The server answered the offer: a refused credential ends here, a refused session is
      // continued by the page; no answer (network, 5xx, timeout) is tried again.
      if (error.status === 401 || error.status === 403) this._setState("failed", { code: error.code });
      else if (error.status >= 400 && error.status < 500 && error.status !== 408) this._lost(error.code);
      else retry();
    });
  }

  _resumed(first) {
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
  }

  _lost(reason) {
    this._closing = true;
    this._stopAckTimer();
    if (this.transport) this.transport.close();
    this._setState("lost", { reason });
  }

  _setState(state, detail = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...detail } }));
  }
}

export function realtimeUrl() {
  const base = apiBase();
  if (base) return `${base.replace(/^http/, "ws")}/v1/realtime`; // the runtime elsewhere
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/v1/realtime`;
}
