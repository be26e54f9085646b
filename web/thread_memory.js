// The talk page's thread-memory panel (SPEC TM-5, issue 17): the facts the current thread has
// learned, beside the transcript, with Forget, Edit (= Remember under the same key), Add, the
// two switches and Refresh, over /api/threads/{id}/memory (docs/http_api.md).
//
// Theory of operation
// 1. One view at a time, of one thread. A view comes from GET, from a command's answer or from
//    the live event `openrealtime.thread_memory.updated` (any tab's command, or a turn's
//    consolidation). `ThreadMemoryView.offer` keeps it when it is of the open thread and its
//    revision is not older than the one shown (revisions only go up; a slow answer never
//    puts an older view back).
// 2. Every command carries the head and revision of the view shown (`expected`, `revision`):
//    the person acted on what they saw. A 409 (someone or something changed it meanwhile, or
//    the fact to forget is gone) reloads the view and says so — never a silent retry.
// 3. Drafts survive redraws: the Add form is static HTML, and an open editor is drawn again
//    from what was typed in it; when its fact changed meanwhile the editor says so.
// 4. The page's own conversation moves the head too (every turn is journaled) without changing
//    the memory, and no live event says so when nothing is learned from the turn. So after
//    the page saw its conversation go on (`conversationMoved`), a command first reads the view
//    again: the same revision means the same memory, and the command goes out with the new
//    head; another revision is a change from elsewhere, shown as in rule 2 (nothing is sent).
// 5. No thread, no memory: before a session (or a continued record) names a thread the panel
//    shows a hint, and a thread the server does not know (yet) is a hint too, not an error.

import { ApiError, api, el, errorText, formatTime } from "./api.js";

export const KINDS = ["fact", "decision", "preference", "procedure", "hypothesis"];
export const SWITCHES = {
  use: "Use memory in answers",
  generate: "Learn from this conversation",
};
const CONFLICT_TEXT = "Memory changed elsewhere — reloaded. Check it and try again.";
// The 409s that mean "not what you saw" (rule 2); another 409 (a full memory) is a refusal.
const CONFLICT_CODES = new Set(["thread_conflict", "unknown_fact"]);

/** The memory of one thread as the server last showed it, and the commands on it (no DOM). */
export class ThreadMemoryView extends EventTarget {
  threadId = null;
  view = null; // the last view taken (rule 1)
  missing = false; // the server has no memory of this thread (404)
  moved = false; // the conversation went on since the view was read (rule 4)

  constructor({ call = api } = {}) {
    super();
    this._call = call;
  }

  _path() {
    return `/api/threads/${encodeURIComponent(this.threadId)}/memory`;
  }

  _changed() {
    this.dispatchEvent(new CustomEvent("change"));
  }

  /** Show the memory of `threadId` (null: no thread). */
  async open(threadId) {
    if (threadId !== this.threadId) {
      this.threadId = threadId || null;
      this.view = null;
      this.missing = false;
      this._changed();
    }
    if (this.threadId) await this.load();
  }

  /** GET the view again; throws what the server said, but a 404 (rule 4). */
  async load() {
    const threadId = this.threadId;
    if (!threadId) return;
    this.moved = false;
    try {
      const view = await this._call(this._path());
      if (threadId === this.threadId) this.missing = false;
      this.offer(threadId, view);
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 404)) throw error;
      if (threadId === this.threadId) {
        this.missing = true;
        this._changed();
      }
    }
  }

  /** Take `view` of `threadId` if it is of the open thread and not older (rule 1). */
  offer(threadId, view) {
    if (!view || threadId !== this.threadId) return false;
    if (this.view && view.revision < this.view.revision) return false;
    this.view = view;
    this.missing = false;
    this._changed();
    return true;
  }

  /** This page's conversation went on: the thread's head moved (rule 4). */
  conversationMoved() {
    this.moved = true;
  }

  /**
   * Send `command` with the shown head and revision (rule 2). Returns {ok: true, view} or
   * {ok: false, conflict, error}; on a conflict the view has been reloaded.
   */
  async send(command) {
    const threadId = this.threadId;
    if (!threadId || !this.view) return { ok: false, conflict: false, error: new Error("no thread memory shown") };
    if (this.moved) {
      const shown = this.view.revision;
      try {
        await this.load();
      } catch (error) {
        return { ok: false, conflict: false, error };
      }
      if (!this.view || this.view.revision !== shown) {
        return { ok: false, conflict: true, error: new ApiError(409, "thread_conflict", "the memory changed elsewhere") };
      }
    }
    const body = { expected: this.view.head, revision: this.view.revision, command };
    try {
      const view = await this._call(this._path(), { method: "POST", body });
      this.offer(threadId, view);
      return { ok: true, view };
    } catch (error) {
      if (error instanceof ApiError && error.status === 409 && CONFLICT_CODES.has(error.code)) {
        await this.load().catch(() => {});
        return { ok: false, conflict: true, error };
      }
      return { ok: false, conflict: false, error };
    }
  }
}

/** How a switch stands: effective value and where it comes from. */
export function switchState(view, name) {
  const override = view.overrides ? view.overrides[name] : null;
  const on = override === null || override === undefined ? view.settings[name] !== false : override;
  return { on, overridden: override !== null && override !== undefined };
}

/** What a Refresh changed: facts new or updated, and facts forgotten, between two views. */
export function refreshOutcome(before, after) {
  const old = new Map(before.entries.map((f) => [f.key, f]));
  let changed = 0;
  for (const fact of after.entries) {
    const was = old.get(fact.key);
    if (!was || was.updated_at !== fact.updated_at || was.status !== fact.status) changed += 1;
  }
  return changed;
}

function kindSelect(value, attrs) {
  const select = el("select", attrs, ...KINDS.map((k) => el("option", { value: k }, k)));
  select.value = KINDS.includes(value) ? value : "fact";
  return select;
}

/** The panel (`<aside id="thread-memory">` in index.html) drawn from a ThreadMemoryView. */
export class ThreadMemoryPanel {
  editing = null; // {key, content, kind, seen: the fact's updated_at when editing began}
  busy = false;

  constructor(root, memory = new ThreadMemoryView()) {
    this.root = root;
    this.memory = memory;
    this.$ = (id) => root.querySelector(`#${id}`);
    memory.addEventListener("change", () => this.draw());
    this.$("tm-refresh").addEventListener("click", () => this.refresh());
    this.$("tm-add").addEventListener("submit", (event) => this.add(event));
    for (const name of Object.keys(SWITCHES)) {
      this.$(`tm-${name}`).addEventListener("change", (e) => this.configure({ [name]: e.target.checked }));
      this.$(`tm-${name}-default`).addEventListener("click", () => this.configure({ [name]: null }));
    }
    this.draw();
  }

  /** Show the memory of `threadId` (null: the hint). Load failures are said in the panel. */
  async open(threadId) {
    if (threadId !== this.memory.threadId) {
      this.editing = null;
      this.status("");
    }
    try {
      await this.memory.open(threadId);
    } catch (error) {
      this.status(`Could not load the thread's memory: ${errorText(error)}`, "warn");
    }
  }

  /** The page's conversation went on (rule 4). */
  conversationMoved() {
    this.memory.conversationMoved();
  }

  /** The live event `openrealtime.thread_memory.updated`. */
  live(event) {
    this.memory.offer(event.thread_id, event.memory);
  }

  async reload() {
    try {
      await this.memory.load();
    } catch (error) {
      this.status(`Could not load the thread's memory: ${errorText(error)}`, "warn");
    }
  }

  /** Say `text` in the panel's status line; `failure`: the view's last_failure it reports. */
  status(text, kind = "", failure = "") {
    const box = this.$("tm-status");
    box.className = `banner small ${kind}`.trim();
    box.textContent = text;
    box.classList.toggle("hidden", !text);
    box.dataset.kind = text ? kind || "info" : "";
    box.dataset.failure = failure;
  }

  /** Run a command; says how it went. Returns the new view, or null. */
  async run(command, { done = "", failed = "Not changed" } = {}) {
    this.setBusy(true);
    const result = await this.memory.send(command);
    this.setBusy(false);
    if (result.ok) {
      this.status(done);
      return result.view;
    }
    if (result.conflict) {
      const gone = result.error.code === "unknown_fact" ? " (that fact was no longer there)" : "";
      this.status(`${CONFLICT_TEXT}${gone}`, "warn");
    } else {
      this.status(`${failed}: ${errorText(result.error)}`, "bad");
    }
    this.draw(); // a switch the server refused goes back to what the view says
    return null;
  }

  setBusy(busy) {
    this.busy = busy;
    this.root.dataset.busy = String(busy);
    this.draw();
  }

  async add(event) {
    event.preventDefault();
    const key = this.$("tm-add-key").value.trim();
    const content = this.$("tm-add-content").value.trim();
    if (!key || !content) return;
    const view = await this.run(
      { type: "remember", key, content, kind: this.$("tm-add-kind").value },
      { done: "Remembered.", failed: "Not remembered" },
    );
    if (view) {
      this.$("tm-add-key").value = "";
      this.$("tm-add-content").value = "";
    }
  }

  async forget(fact) {
    await this.run({ type: "forget", key: fact.key }, { done: `Forgot “${fact.key}”.`, failed: "Not forgotten" });
  }

  async restore(fact) {
    await this.run(
      { type: "remember", key: fact.key, content: fact.content, kind: fact.kind },
      { done: `Remembered “${fact.key}” again.`, failed: "Not remembered" },
    );
  }

  async saveEdit() {
    const { key, content, kind } = this.editing;
    const view = await this.run(
      { type: "remember", key, content: content.trim(), kind },
      { done: `Changed “${key}”.`, failed: "Not changed" },
    );
    if (view) {
      this.editing = null;
      this.draw();
    }
  }

  async configure(change) {
    await this.run({ type: "configure", ...change }, { done: "", failed: "Switch not changed" });
  }

  async refresh() {
    const before = this.memory.view;
    const button = this.$("tm-refresh");
    this.status("Refreshing — reading the conversation into memory…");
    button.textContent = "Refreshing…";
    const view = await this.run({ type: "refresh" }, { failed: "Refresh failed" });
    button.textContent = "Refresh";
    if (!view) return;
    if (view.last_failure) {
      this.status(`Refresh failed: ${view.last_failure}`, "warn", view.last_failure);
      this.draw();
      return;
    }
    const changed = refreshOutcome(before, view);
    this.status(changed ? `Refreshed — ${changed} ${changed === 1 ? "fact" : "facts"} changed.` : "Refreshed — nothing new to remember.");
  }

  // ---------------------------------------------------------------- drawing

  draw() {
    const { threadId, view, missing } = this.memory;
    const shown = Boolean(threadId && view);
    this.$("tm-hint").textContent = !threadId
      ? "Start a conversation: what this thread learns shows here."
      : missing
        ? "This thread has no memory yet; it shows here once the conversation starts."
        : "Loading…";
    this.$("tm-hint").classList.toggle("hidden", shown);
    this.$("tm-body").classList.toggle("hidden", !shown);
    // A server whose brain has no model cannot learn on request (view.can_refresh).
    this.$("tm-refresh").classList.toggle("hidden", !shown || view.can_refresh === false);
    this.root.dataset.thread = threadId || "";
    this.root.dataset.revision = view ? String(view.revision) : "";
    if (!shown) {
      this.$("tm-count").classList.add("hidden");
      return;
    }
    for (const name of Object.keys(SWITCHES)) this.drawSwitch(view, name);
    const failure = this.$("tm-failure");
    failure.textContent = view.last_failure ? `Last update failed: ${view.last_failure}` : "";
    // Not twice: a Refresh that failed says it in the status line already.
    failure.classList.toggle("hidden", !view.last_failure || this.$("tm-status").dataset.failure === view.last_failure);
    const active = view.entries.filter((f) => f.status === "active");
    const retracted = view.entries.filter((f) => f.status !== "active");
    if (this.editing && !active.some((f) => f.key === this.editing.key)) this.editing = null;
    this.$("tm-facts").replaceChildren(...active.map((f) => this.drawFact(f)));
    this.$("tm-empty").classList.toggle("hidden", active.length > 0);
    this.$("tm-count").textContent = String(active.length);
    this.$("tm-count").classList.toggle("hidden", active.length === 0);
    this.$("tm-retracted").classList.toggle("hidden", retracted.length === 0);
    this.$("tm-retracted-count").textContent = String(retracted.length);
    this.$("tm-retracted-list").replaceChildren(...retracted.map((f) => this.drawRetracted(f)));
    // One command at a time: everything waits while one runs.
    for (const node of this.root.querySelectorAll("button, input, select, textarea")) node.disabled = this.busy;
  }

  drawSwitch(view, name) {
    const { on, overridden } = switchState(view, name);
    this.$(`tm-${name}`).checked = on;
    const source = this.$(`tm-${name}-source`);
    source.textContent = overridden ? "this thread" : "default";
    source.title = overridden ? "Set for this thread; “Use default” clears it" : "The default for your conversations";
    source.classList.toggle("override", overridden);
    source.dataset.source = overridden ? "override" : "default";
    this.$(`tm-${name}-default`).classList.toggle("hidden", !overridden);
  }

  drawFact(fact) {
    const item = el("li", { class: "tm-fact", "data-key": fact.key, "data-kind": fact.kind });
    if (this.editing && this.editing.key === fact.key) {
      item.append(this.drawEditor(fact));
      return item;
    }
    const edit = el("button", { type: "button", class: "tm-edit small-button" }, "Edit");
    const forget = el("button", { type: "button", class: "tm-forget danger small-button" }, "Forget");
    edit.addEventListener("click", () => {
      this.editing = { key: fact.key, content: fact.content, kind: fact.kind, seen: fact.updated_at };
      this.draw();
      this.root.querySelector(".tm-edit-content")?.focus();
    });
    forget.addEventListener("click", () => this.forget(fact));
    item.append(
      el(
        "div",
        { class: "row spread tm-fact-head" },
        el("span", { class: "row" }, el("code", { class: "tm-key" }, fact.key), el("span", { class: `badge kind-${fact.kind} tm-kind` }, fact.kind)),
        el("span", { class: "row" }, edit, forget),
      ),
      el("div", { class: "tm-content" }, fact.content),
      el("div", { class: "muted small tm-meta", title: (fact.sources || []).join(" ") }, this.meta(fact)),
    );
    return item;
  }

  meta(fact) {
    const sources = (fact.sources || []).length;
    const from = sources ? ` · from ${sources} ${sources === 1 ? "item" : "items"}` : "";
    return `${formatTime(fact.updated_at)}${from}`;
  }

  drawEditor(fact) {
    const draft = this.editing;
    const content = el("textarea", { class: "tm-edit-content", rows: 2, maxlength: 500, "aria-label": `Content of ${fact.key}` });
    content.value = draft.content;
    content.addEventListener("input", () => { draft.content = content.value; });
    const kind = kindSelect(draft.kind, { class: "tm-edit-kind", "aria-label": `Kind of ${fact.key}` });
    kind.addEventListener("change", () => { draft.kind = kind.value; });
    const save = el("button", { type: "submit", class: "primary tm-save small-button" }, "Remember");
    const cancel = el("button", { type: "button", class: "tm-cancel small-button" }, "Cancel");
    cancel.addEventListener("click", () => {
      this.editing = null;
      this.draw();
    });
    const form = el(
      "form",
      { class: "tm-editor" },
      el("div", { class: "row spread" }, el("code", { class: "tm-key" }, fact.key), kind),
      content,
      draft.seen !== fact.updated_at
        ? el("div", { class: "small tm-edit-stale" }, `Changed meanwhile, now: “${fact.content}” (${fact.kind}).`)
        : null,
      el("div", { class: "row" }, save, cancel),
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      if (draft.content.trim()) this.saveEdit();
    });
    return form;
  }

  drawRetracted(fact) {
    const restore = el("button", { type: "button", class: "tm-restore small-button" }, "Remember again");
    restore.addEventListener("click", () => this.restore(fact));
    return el(
      "li",
      { class: "tm-fact retracted", "data-key": fact.key, "data-kind": fact.kind },
      el(
        "div",
        { class: "row spread tm-fact-head" },
        el("span", { class: "row" }, el("code", { class: "tm-key" }, fact.key), el("span", { class: `badge kind-${fact.kind} tm-kind` }, fact.kind)),
        restore,
      ),
      el("div", { class: "tm-content" }, fact.content),
      el("div", { class: "muted small tm-meta" }, `forgotten · ${formatTime(fact.updated_at)}`),
    );
  }
}
