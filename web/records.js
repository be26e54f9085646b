// Conversation records (SPEC CONV-1 … CONV-3): the talk page's transcript, saved through
// POST /api/conversations.
//
// Theory of operation
// -------------------
// A record is a snapshot {id, messages, version, confirmed, thread_id, voice_session_id,
// role_id, title}: `confirmed` messages are on the server at `version`. Every change is written
// to IndexedDB first (per account), then a flush (every FLUSH_MS, and when the page is hidden,
// left or back online) sends the next segment: at most SEGMENT_MESSAGES messages and
// SEGMENT_BYTES of UTF-8, from `confirmed` on, with a fresh idempotency key and `base_version`.
// The request itself is stored before it is sent ("in flight"); until the server answers it is
// retried verbatim — same key — so a lost response never writes twice. Failures back off
// 1 s, 2 s, … 30 s per record; other records keep saving. A 409 (another writer moved the
// version) or another 4xx stops automatic saving for that record and offers an export. Snapshots
// left unsent (offline, tab closed) are retried the next time a page of this account opens.
// Records store the thread and voice session ids, never the resume token.

import { api, ApiError } from "./api.js";

export const FLUSH_MS = 800;
export const SEGMENT_MESSAGES = 100;
export const SEGMENT_BYTES = 64 * 1024;
export const MAX_MESSAGES = 100_000;
const BACKOFF_MIN_MS = 1000;
const BACKOFF_MAX_MS = 30_000;
const KEEPALIVE_BYTES = 60 * 1024; // browsers cap keepalive bodies at 64 KiB in total

// ------------------------------------------------------------------ IndexedDB

const DB_NAME = "openrealtime";
const STORE = "record_snapshots";

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

export class SnapshotStore {
  constructor(account) {
    this.account = account;
    this._db = null;
  }

  async db() {
    if (!this._db) {
      const open = indexedDB.open(DB_NAME, 1);
      open.onupgradeneeded = () => {
        const store = open.result.createObjectStore(STORE, { keyPath: "key" });
        store.createIndex("account", "account");
      };
      this._db = await request(open);
    }
    return this._db;
  }

  async _tx(mode, work) {
    const db = await this.db();
    const tx = db.transaction(STORE, mode);
    const result = await work(tx.objectStore(STORE));
    await new Promise((resolve, reject) => {
      tx.oncomplete = resolve;
      tx.onerror = () => reject(tx.error);
      tx.onabort = () => reject(tx.error);
    });
    return result;
  }

  key(id) {
    return `${this.account}\n${id}`;
  }

  put(snapshot) {
    const row = { ...snapshot, key: this.key(snapshot.id), account: this.account };
    return this._tx("readwrite", (store) => request(store.put(row)));
  }

  get(id) {
    return this._tx("readonly", (store) => request(store.get(this.key(id))));
  }

  remove(id) {
    return this._tx("readwrite", (store) => request(store.delete(this.key(id))));
  }

  list() {
    return this._tx("readonly", (store) => request(store.index("account").getAll(this.account)));
  }
}

// ------------------------------------------------------------------ saving

const encoder = new TextEncoder();

/** The next segment from `start`: ≤ SEGMENT_MESSAGES messages and ≤ SEGMENT_BYTES of UTF-8. */
export function nextSegment(messages, start) {
  const out = [];
  let bytes = 0;
  for (let i = start; i < messages.length && out.length < SEGMENT_MESSAGES; i++) {
    const message = { role: messages[i].role, text: messages[i].text, at: messages[i].at };
    const size = encoder.encode(JSON.stringify(message)).length;
    if (out.length > 0 && bytes + size > SEGMENT_BYTES) break;
    out.push(message);
    bytes += size;
  }
  return out;
}

export function newRecord(fields = {}) {
  return {
    id: crypto.randomUUID(),
    messages: [],
    version: 0,
    confirmed: 0,
    thread_id: null,
    voice_session_id: null,
    role_id: null,
    title: "",
    inflight: null,
    ...fields,
  };
}

export class RecordSaver extends EventTarget {
  constructor(account) {
    super();
    this.store = new SnapshotStore(account);
    this.records = new Map(); // id → {snapshot, failures, nextAt, sending, stopped, error}
    this._timer = setInterval(() => this.flushAll(), FLUSH_MS);
    const flushNow = () => this.flushAll({ leaving: document.visibilityState === "hidden" });
    document.addEventListener("visibilitychange", flushNow);
    window.addEventListener("pagehide", () => this.flushAll({ leaving: true }));
    window.addEventListener("online", () => {
      for (const entry of this.records.values()) entry.nextAt = 0;
      this.flushAll();
    });
  }

  /** Start saving `snapshot` (written locally first). */
  async track(snapshot) {
    const entry = { snapshot, failures: 0, nextAt: 0, sending: false, stopped: null, error: null };
    this.records.set(snapshot.id, entry);
    await this._persist(entry);
    this._emit(entry);
    return entry;
  }

  /** Retry every unsent snapshot this account left in IndexedDB (except those tracked). */
  async resumePending() {
    let rows = [];
    try {
      rows = await this.store.list();
    } catch (error) {
      this.dispatchEvent(new CustomEvent("storage-error", { detail: String(error) }));
      return [];
    }
    const resumed = [];
    for (const row of rows) {
      if (this.records.has(row.id)) continue;
      const snapshot = { ...row };
      delete snapshot.key;
      delete snapshot.account;
      const entry = { snapshot, failures: 0, nextAt: 0, sending: false, stopped: row.stopped || null, error: null };
      this.records.set(snapshot.id, entry);
      resumed.push(snapshot.id);
    }
    await this.flushAll();
    return resumed;
  }

  async localSnapshot(id) {
    try {
      const row = await this.store.get(id);
      if (!row) return null;
      const snapshot = { ...row };
      delete snapshot.key;
      delete snapshot.account;
      return snapshot;
    } catch {
      return null;
    }
  }

  async append(id, message) {
    const entry = this.records.get(id);
    if (!entry) return;
    const snapshot = entry.snapshot;
    if (snapshot.messages.length >= MAX_MESSAGES) {
      entry.error = `this conversation reached ${MAX_MESSAGES} messages; later messages are not saved`;
      this._emit(entry);
      return;
    }
    snapshot.messages.push(message);
    if (!snapshot.title && message.role === "user") snapshot.title = message.text.slice(0, 80);
    await this._persist(entry);
    this._emit(entry);
  }

  /** Replace the messages from `index` on (a resume's reconcile); they are saved again. */
  async replaceFrom(id, index, messages) {
    const entry = this.records.get(id);
    if (!entry) return;
    const snapshot = entry.snapshot;
    snapshot.messages = snapshot.messages.slice(0, index).concat(messages);
    if (snapshot.confirmed > index) {
      snapshot.rewriteFrom = Math.min(snapshot.rewriteFrom ?? index, index);
    }
    await this._persist(entry);
    this._emit(entry);
  }

  async update(id, fields) {
    const entry = this.records.get(id);
    if (!entry) return;
    Object.assign(entry.snapshot, fields);
    await this._persist(entry);
  }

  /** Forget a record locally (after an export, or when the server deleted it). */
  async discard(id) {
    this.records.delete(id);
    await this.store.remove(id).catch(() => {});
  }

  status(id) {
    const entry = this.records.get(id);
    return entry ? this._statusOf(entry) : null;
  }

  async flushAll({ leaving = false } = {}) {
    const now = Date.now();
    await Promise.all(
      [...this.records.values()].map((entry) => (entry.nextAt <= now || leaving ? this._flush(entry, leaving) : null)),
    );
  }

  async _flush(entry, leaving) {
    if (entry.sending || entry.stopped) return;
    const snapshot = entry.snapshot;
    if (!snapshot.inflight) {
      const rewrite = snapshot.rewriteFrom ?? null;
      if (rewrite !== null && rewrite >= snapshot.messages.length) snapshot.rewriteFrom = null;
      const start = rewrite !== null && rewrite < snapshot.messages.length ? Math.min(rewrite, snapshot.confirmed) : snapshot.confirmed;
      if (start >= snapshot.messages.length) return;
      const messages = nextSegment(snapshot.messages, start);
      const body = {
        id: snapshot.id,
        idempotency_key: crypto.randomUUID(),
        base_version: snapshot.version,
        start_index: start,
        messages,
        role_id: snapshot.role_id || undefined,
        title: snapshot.title || undefined,
        thread_id: snapshot.thread_id || undefined,
        voice_session_id: snapshot.voice_session_id || undefined,
      };
      snapshot.inflight = body;
      await this._persist(entry); // the request is stored before it is sent
    }
    entry.sending = true;
    this._emit(entry);
    const body = snapshot.inflight;
    try {
      const keepalive = leaving && encoder.encode(JSON.stringify(body)).length < KEEPALIVE_BYTES;
      const saved = await api("/api/conversations", { method: "POST", body, keepalive });
      snapshot.version = saved.version;
      // What is known to be stored in order (the server may keep a longer, older tail).
      snapshot.confirmed = body.start_index + body.messages.length;
      if (snapshot.rewriteFrom != null && body.start_index <= snapshot.rewriteFrom) snapshot.rewriteFrom = null;
      snapshot.inflight = null;
      entry.failures = 0;
      entry.nextAt = 0;
      entry.error = null;
      entry.sending = false;
      if (snapshot.confirmed >= snapshot.messages.length) {
        await this.store.remove(snapshot.id).catch(() => {}); // nothing unsent: no local copy
      } else {
        await this._persist(entry);
        this._emit(entry);
        return this._flush(entry, leaving);
      }
    } catch (error) {
      entry.sending = false;
      if (error instanceof ApiError && error.status >= 400 && error.status < 500 && error.status !== 408 && error.status !== 429) {
        // A conflict or an invalid request: never overwrite automatically; offer an export.
        entry.stopped = error.code === "version_conflict" ? "conflict" : "rejected";
        entry.error = error.status === 409 ? `the saved conversation changed elsewhere (version ${error.body?.current_version ?? "?"})` : error.message;
        snapshot.inflight = null;
        snapshot.stopped = entry.stopped;
        await this._persist(entry);
      } else {
        entry.failures += 1;
        const delay = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** (entry.failures - 1));
        entry.nextAt = Date.now() + delay;
        entry.error = error instanceof ApiError ? error.message : "offline or server unreachable";
      }
    }
    this._emit(entry);
  }

  async _persist(entry) {
    try {
      const { snapshot } = entry;
      await this.store.put({ ...snapshot, stopped: entry.stopped });
    } catch (error) {
      this.dispatchEvent(new CustomEvent("storage-error", { detail: String(error) }));
    }
  }

  _statusOf(entry) {
    const { snapshot } = entry;
    let state = "saved";
    if (entry.stopped) state = entry.stopped;
    else if (entry.sending) state = "saving";
    else if (entry.failures > 0) state = "retrying";
    else if (snapshot.inflight || snapshot.confirmed < snapshot.messages.length) state = "pending";
    return {
      id: snapshot.id,
      state,
      version: snapshot.version,
      confirmed: snapshot.confirmed,
      total: snapshot.messages.length,
      retryInMs: entry.failures > 0 ? Math.max(0, entry.nextAt - Date.now()) : 0,
      error: entry.error,
    };
  }

  _emit(entry) {
    this.dispatchEvent(new CustomEvent("status", { detail: this._statusOf(entry) }));
  }
}
