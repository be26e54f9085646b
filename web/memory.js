// The memory page (SPEC WEB-3): per role list, add, edit, delete, clear and on/off over
// /api/memory. Edits and deletes carry the entry's revision; a 409 means it changed elsewhere
// (e.g. learned again from a conversation) and the page shows the conflict and reloads it.
// On/off: admins and owners switch the role's default (`#enabled`, scope "role"); a member
// switches a personal override (`#my-enabled`, scope "user") — the server refuses a member's
// role switch anyway (403).

import { api, el, errorText, formatTime, isAdmin, listRoles, signedIn } from "./api.js";

const $ = (id) => document.getElementById(id);

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

function roleId() {
  return $("role").value;
}

function conflictText(error) {
  if (error.status === 409) return "This memory changed elsewhere since you loaded it; the list was reloaded — check it and try again.";
  return errorText(error);
}

async function load() {
  let data;
  try {
    data = await api(`/api/memory?role_id=${encodeURIComponent(roleId())}`);
  } catch (error) {
    notice(`Could not load memories: ${errorText(error)}`, "bad");
    return;
  }
  await loadSettings();
  const entries = data.entries.filter((e) => e.status !== "deleted");
  $("count").textContent = `${entries.length} ${entries.length === 1 ? "memory" : "memories"}`;
  $("empty").classList.toggle("hidden", entries.length > 0);
  $("entries").replaceChildren(...entries.map(renderEntry));
}

let admin = false;
let switches = 0; // a setting read that started before the person's last switch is stale

async function loadSettings() {
  const asked = switches;
  let view;
  try {
    view = await api(`/api/memory/settings?role_id=${encodeURIComponent(roleId())}`);
  } catch (error) {
    notice(`Could not load the memory setting: ${errorText(error)}`, "bad");
    return;
  }
  // A switch made while the read was on its way is not undone by the older answer: the
  // reload after the switch shows the server's state.
  if (asked !== switches) return;
  const roleOn = view.defaults.memory_enabled !== false;
  if (admin) {
    $("enabled").checked = roleOn;
  } else {
    // With the role's memory off, it is off for everyone: a personal switch cannot turn it on.
    $("my-enabled").checked = view.settings.memory_enabled !== false;
    $("my-enabled").disabled = !roleOn;
  }
  $("role-off").classList.toggle("hidden", admin || roleOn);
}

async function switchMemory(box, scope) {
  switches += 1;
  try {
    await api("/api/memory/settings", { method: "PUT", body: { role_id: roleId(), enabled: box.checked, scope } });
  } catch (error) {
    notice(`Could not change the setting: ${errorText(error)}`, "bad");
  }
  await load();
}

function renderEntry(entry) {
  const text = el("div", { class: "entry-content" }, entry.content);
  const meta = el(
    "div",
    { class: "muted small" },
    `${entry.kind} · ${entry.origin === "person" ? "added or edited by you" : "learned from a conversation"} · revision ${entry.revision} · ${formatTime(entry.updated_at)}`,
  );
  const edit = el("button", { type: "button", class: "edit" }, "Edit");
  const remove = el("button", { type: "button", class: "danger delete" }, "Delete");
  const item = el("li", { "data-id": entry.id }, el("div", { class: "row spread" }, el("div", { class: "grow" }, text, meta), el("div", { class: "row" }, edit, remove)));
  edit.addEventListener("click", () => startEdit(item, entry));
  remove.addEventListener("click", async () => {
    try {
      await api(`/api/memory/${encodeURIComponent(entry.id)}?revision=${entry.revision}`, { method: "DELETE" });
      notice("");
    } catch (error) {
      notice(conflictText(error), "bad");
    }
    await load();
  });
  return item;
}

function startEdit(item, entry) {
  const input = el("input", { type: "text", class: "grow edit-content", maxlength: 300, value: entry.content });
  const save = el("button", { type: "submit", class: "primary" }, "Save");
  const cancel = el("button", { type: "button" }, "Cancel");
  const form = el("form", { class: "row" }, input, save, cancel);
  cancel.addEventListener("click", () => load());
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api(`/api/memory/${encodeURIComponent(entry.id)}`, {
        method: "PATCH",
        body: { content: input.value, revision: entry.revision },
      });
      notice("");
    } catch (error) {
      notice(conflictText(error), "bad");
    }
    await load();
  });
  item.replaceChildren(form);
  input.focus();
}

async function main() {
  const who = await signedIn("memory.html");
  if (!who) return;
  admin = isAdmin(who);
  const roles = await listRoles();
  for (const role of roles) {
    const option = el("option", { value: role.id }, role.name);
    if (role.is_default) option.selected = true;
    $("role").append(option);
  }
  const wanted = new URLSearchParams(location.search).get("role");
  if (wanted) $("role").value = wanted;
  $("role").addEventListener("change", () => {
    $("add-content").value = ""; // a draft belongs to the role it was written for
    notice("");
    load();
  });
  $("refresh").addEventListener("click", load);
  if (admin) $("enabled").addEventListener("change", () => switchMemory($("enabled"), "role"));
  else $("my-enabled").addEventListener("change", () => switchMemory($("my-enabled"), "user"));
  $("clear").addEventListener("click", async () => {
    if (!confirm("Delete every memory of this role?")) return;
    try {
      const { deleted } = await api("/api/memory/clear", { method: "POST", body: { role_id: roleId() } });
      notice(`${deleted} memories deleted.`);
    } catch (error) {
      notice(errorText(error), "bad");
    }
    await load();
  });
  $("add-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      await api("/api/memory", {
        method: "POST",
        body: { role_id: roleId(), kind: $("add-kind").value, content: $("add-content").value },
      });
      $("add-content").value = "";
      notice("");
    } catch (error) {
      notice(`Not added: ${errorText(error)}`, "bad");
    }
    await load();
  });
  await load();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
