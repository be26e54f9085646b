// The history page (SPEC WEB-2, RES-3, CONV-4): this account's conversation records, one in
// detail, "continue this conversation" for records the runtime can continue (view-only with the
// server's reason otherwise), export, and delete with the options to erase the runtime journal
// and to forget what the agent learned from the conversation (RM-7: a purge of its thread's tag
// in the role's shared memory, made after the delete; without it, what was learned is kept).
// Phone calls (SPEC TEL-5) are listed beside them: when, from and to which number, how long,
// who hung up or where the call was put through; a call opens to its transcript.
// A conversation's recordings (SPEC REC-3) play beside it (web/recording_player.js); deleting
// it can schedule them for deletion too (REC-5): the report shows each one's state — scheduled,
// or deleted with its receipt — until the cleanup has run.

import { api, downloadJson, el, errorText, formatTime, listRoles, plural, signedIn } from "./api.js";
import { RecordSaver } from "./records.js";
import { showRecordings } from "./recording_player.js";

const $ = (id) => document.getElementById(id);
let roleNames = new Map();
let caller = null;

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

function roleName(id) {
  return roleNames.get(id) || id || "default role";
}

async function showList() {
  $("detail").classList.add("hidden");
  $("list-panel").classList.remove("hidden");
  let conversations;
  try {
    ({ conversations } = await api("/api/conversations"));
  } catch (error) {
    notice(`Could not load conversations: ${errorText(error)}`, "bad");
    return;
  }
  const list = $("conversations");
  list.replaceChildren();
  for (const c of conversations) {
    const link = el("a", { class: "item-link", href: `history.html?id=${encodeURIComponent(c.id)}` }, c.title || "Untitled conversation");
    const badge = c.continuable
      ? el("span", { class: "badge ok" }, "can continue")
      : el("span", { class: "badge warn", title: c.view_only_reason || "" }, "view only");
    list.append(
      el(
        "li",
        { "data-id": c.id },
        el("div", { class: "row spread" }, link, badge),
        el("div", { class: "muted small" }, `${roleName(c.role_id)} · ${plural(c.message_count, "message")} · ${formatTime(c.updated_at)}`),
      ),
    );
  }
  $("empty").classList.toggle("hidden", conversations.length > 0);
}

function callSummary(c) {
  const ended = {
    caller: "the caller hung up",
    agent: c.transfer_target ? `put through to ${c.transfer_target}` : "the agent hung up",
  }[c.ended_by] || "not ended";
  const length = c.duration_s == null ? "" : ` · ${Math.round(c.duration_s)} s`;
  return `${roleName(c.role_id)} · ${c.provider === "sip" ? "SIP" : "Twilio"}${length} · ${ended} · ${formatTime(c.started_at)}`;
}

async function showCalls() {
  let calls;
  try {
    ({ calls } = await api("/api/calls"));
  } catch (error) {
    notice(`Could not load phone calls: ${errorText(error)}`, "bad");
    return;
  }
  const list = $("calls");
  list.replaceChildren();
  for (const c of calls) {
    const transcript = el("div", { class: "transcript hidden" });
    const open = el("button", { type: "button", class: "link" }, `${c.caller || "unknown"} → ${c.called || "unknown"}`);
    open.addEventListener("click", async () => {
      // The transcript opens at once, saying it is loading; it is filled once, and
      // `data-loaded` marks it whole (a second click while it loads only hides it).
      if (transcript.classList.toggle("hidden") || transcript.childElementCount) return;
      transcript.append(el("p", { class: "muted" }, "Loading…"));
      let lines;
      try {
        const { messages } = await api(`/api/calls/${encodeURIComponent(c.id)}`);
        lines = messages.map((m) => {
          const who = m.role === "user" ? "Caller" : m.interrupted ? "Agent (interrupted)" : "Agent";
          return el("p", { class: `msg ${m.role}` }, el("strong", {}, `${who}: `), m.text);
        });
        if (!lines.length) lines.push(el("p", { class: "muted" }, "Nothing was said."));
      } catch (error) {
        lines = [el("p", { class: "muted" }, `Could not load: ${errorText(error)}`)];
      }
      transcript.replaceChildren(...lines);
      transcript.dataset.loaded = "true";
    });
    list.append(el("li", { "data-call": c.id }, open, el("div", { class: "muted small" }, callSummary(c)), transcript));
  }
  $("calls-panel").classList.toggle("hidden", calls.length === 0);
}

async function showDetail(id) {
  $("list-panel").classList.add("hidden");
  $("detail").classList.remove("hidden");
  let record;
  try {
    record = await api(`/api/conversations/${encodeURIComponent(id)}`);
  } catch (error) {
    notice(`Could not open the conversation: ${errorText(error)}`, "bad");
    return;
  }
  $("detail-title").textContent = record.title || "Untitled conversation";
  $("detail-meta").textContent =
    `${roleName(record.role_id)} · ${plural(record.message_count, "message")} · started ${formatTime(record.created_at)} · updated ${formatTime(record.updated_at)}`;
  const messages = $("messages");
  messages.replaceChildren(
    ...record.messages.map((m) =>
      el("div", { class: `msg ${m.role}`, "data-role": m.role }, el("span", { class: "text" }, m.text)),
    ),
  );
  const cont = $("continue");
  cont.classList.toggle("hidden", !record.continuable);
  cont.href = `index.html?continue=${encodeURIComponent(record.id)}`;
  const viewOnly = $("view-only");
  viewOnly.classList.toggle("hidden", record.continuable);
  viewOnly.textContent = record.continuable ? "" : `View only: ${record.view_only_reason}`;
  $("export").onclick = () => downloadJson(`conversation-${record.id}.json`, record);
  let recorded = 0;
  try {
    recorded = await showRecordings($("recordings"), record.thread_id, caller);
  } catch (error) {
    notice(`Could not load the recordings: ${errorText(error)}`, "bad");
  }
  $("recordings-panel").classList.toggle("hidden", recorded === 0);
  $("delete-recordings-label").classList.toggle("hidden", recorded === 0);
  $("delete").onclick = () => {
    $("erase-journal").checked = false;
    $("forget-learned").checked = false;
    $("delete-recordings").checked = false;
    $("delete-dialog").showModal();
  };
  $("delete-dialog").onclose = async () => {
    if ($("delete-dialog").returnValue !== "delete") return;
    await deleteRecord(record, {
      eraseJournal: $("erase-journal").checked,
      forget: $("forget-learned").checked,
      recordings: recorded > 0 && $("delete-recordings").checked,
    });
  };
}

// A scheduled recording's state: still there (the cleanup has not run) or its receipt.
async function recordingState(id) {
  try {
    const r = await api(`/api/recordings/${encodeURIComponent(id)}`);
    return `${id}: scheduled for deletion${r.retain_until ? ` (from ${formatTime(r.retain_until)})` : ""}`;
  } catch (error) {
    const receipt = error.body && error.body.receipt;
    if (receipt) return `${id}: deleted ${formatTime(receipt.deleted_at)} (receipt: ${receipt.reason}, ${Math.round(receipt.duration_ms / 1000)} s, ${receipt.size_bytes} bytes)`;
    return `${id}: ${errorText(error)}`;
  }
}

async function showRecordingStates(ids) {
  const list = $("recording-receipt-list");
  const states = await Promise.all(ids.map(recordingState));
  list.replaceChildren(...states.map((text, i) => el("li", { "data-recording": ids[i] }, text)));
  $("recording-receipts").classList.remove("hidden");
  $("recheck-recordings").onclick = () => showRecordingStates(ids);
}

// What the agent learned from the record's thread, forgotten (a purge of `thread:<id>` in the
// role's pool) when asked — unless the thread has no runtime ids, or other records still use
// it (the delete kept its memories for them: the last one to go takes them). A report line.
async function forgetLearned(record, report) {
  if (!record.thread_id || !record.role_id) return "Kept — role memory learned from it: the record names no runtime thread";
  if (report.kept.some((k) => k.what === "memories")) return "Kept — role memory learned from it: other conversation records still use this thread";
  try {
    const { purged } = await api(`/api/roles/${encodeURIComponent(record.role_id)}/memory/purge`, {
      method: "POST",
      body: { tag: `thread:${record.thread_id}` },
    });
    return `Role memory learned from it: ${purged} ${purged === 1 ? "entry" : "entries"} forgotten`;
  } catch (error) {
    return `Role memory learned from it: not forgotten (${errorText(error)})`;
  }
}

async function deleteRecord(record, { eraseJournal, forget, recordings }) {
  let report;
  try {
    const query = `erase_journal=${eraseJournal}&delete_recordings=${recordings}`;
    report = await api(`/api/conversations/${encodeURIComponent(record.id)}?${query}`, {
      method: "DELETE",
    });
  } catch (error) {
    const hold = error.code === "recording_protected" ? " The conversation is kept: try again once an admin lifts the hold." : "";
    notice(`Not deleted: ${errorText(error)}${hold}`, "bad");
    return;
  }
  const lines = [
    `Conversation record: removed`,
    `Memories learned from it: ${report.memories_removed} removed${report.receipt_id ? ` (receipt ${report.receipt_id})` : ""}`,
    `Runtime journal: ${eraseJournal ? `${report.journal_events_removed} events erased` : "kept"}`,
    forget ? await forgetLearned(record, report) : "Role memory learned from it: kept",
    ...(report.recordings_scheduled && report.recordings_scheduled.length
      ? [`Recordings: ${report.recordings_scheduled.length} scheduled for deletion (below)`]
      : []),
    ...report.kept.map((k) => `Kept — ${k.what}: ${k.why}`),
  ];
  $("delete-report-text").textContent = lines.join("\n");
  $("delete-report").classList.remove("hidden");
  $("messages").classList.add("hidden");
  $("recordings-panel").classList.add("hidden");
  $("recordings").replaceChildren();
  for (const id of ["continue", "export", "delete", "view-only"]) $(id).classList.add("hidden");
  if (report.recordings_scheduled && report.recordings_scheduled.length) await showRecordingStates(report.recordings_scheduled);
  const saver = window.openrealtimeSaver;
  if (saver) await saver.discard(record.id);
}

async function main() {
  const me = await signedIn("history.html");
  if (!me) return;
  caller = me;
  const who = `${me.tenant}/${me.user}`;
  roleNames = new Map((await listRoles()).map((r) => [r.id, r.name]));
  // Unsent transcripts this account left behind are retried from here too (CONV-3).
  const saver = new RecordSaver(who);
  window.openrealtimeSaver = saver;
  const resumed = await saver.resumePending();
  if (resumed.length) {
    $("pending").textContent = `Saving ${resumed.length} conversation(s) kept on this device…`;
    $("pending").classList.remove("hidden");
    saver.addEventListener("status", () => {
      const open = [...saver.records.values()].filter((e) => e.snapshot.inflight || e.snapshot.confirmed < e.snapshot.messages.length);
      if (!open.length) {
        $("pending").classList.add("hidden");
        showList();
      }
    });
  }
  $("refresh").addEventListener("click", () => Promise.all([showList(), showCalls()]));
  const id = new URLSearchParams(location.search).get("id");
  if (id) await showDetail(id);
  else await Promise.all([showList(), showCalls()]);
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
