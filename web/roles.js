// The roles page (SPEC RT-7, WEB-3): the tenant's roles, each one's configuration in one form —
// name, instructions, language, voice (with a sample spoken by the server's real TTS), long-term
// memory, the role's memory model, the tenant's thread-memory defaults, the caller's documents
// the role may search, and a link to its tools — and deleting a role after saying what becomes
// of its conversations.
//
// Rules:
// 1. Admins and owners edit; members see the same form read-only (the fieldset is disabled and
//    the admin buttons are removed by signedIn). The server refuses a member's edit anyway (403).
// 2. Every save names what it read: the role's `revision` (PATCH/DELETE `expected_revision`) and
//    the memory settings' `revision` (`expected`). A 409 keeps the user's edits on screen and
//    shows the "changed, reload" prompt; reloading shows the role as it is now.
// 3. Each part is saved through its own API, role first: the knowledge binding
//    (PUT /api/roles/{id}/documents) only when the ticked documents changed, the memory model
//    only when it changed, the thread-memory defaults only when they changed.
// 4. Deleting asks the server first what it would do (GET /api/roles/{id}/impact) and says it in
//    the confirmation dialog: how many conversations can no longer be continued.

import { ApiError, api, apiUrl, el, errorText, isAdmin, listRoles, plural, signedIn, token } from "./api.js";

const $ = (id) => document.getElementById(id);

const state = {
  admin: false,
  roles: [],
  voices: null,
  documents: [],
  /** What the form was filled from: {role (null for a new one), bound: Set, settings, tm}. */
  loaded: null,
};
window.openrealtime = { roles: state };

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

function selectedId() {
  return new URLSearchParams(location.search).get("role");
}

function remember(roleId) {
  const url = roleId ? `${location.pathname}?role=${encodeURIComponent(roleId)}` : location.pathname;
  history.replaceState(null, "", url);
}

// ------------------------------------------------------------------ the list

async function loadList() {
  state.roles = await listRoles();
  const current = state.loaded?.role?.id;
  $("roles").replaceChildren(
    ...state.roles.map((role) =>
      el(
        "li",
        { "data-id": role.id, class: role.id === current ? "current" : null },
        el(
          "div",
          { class: "row spread" },
          el("button", { type: "button", class: "link open", onclick: () => openRole(role.id) }, role.name),
          el(
            "div",
            { class: "row" },
            role.is_default ? el("span", { class: "badge" }, "default") : null,
            el("span", { class: `badge ${role.memory_enabled ? "ok" : ""}` }, role.memory_enabled ? "memory on" : "memory off"),
            role.language ? el("span", { class: "badge" }, role.language) : null,
          ),
        ),
        role.instructions ? el("div", { class: "muted small clip" }, role.instructions) : null,
      ),
    ),
  );
}

// ------------------------------------------------------------------ the form

function fillVoices(chosen) {
  const info = state.voices || { voices: [], by_language: {}, default: null };
  const byLanguage = Object.entries(info.by_language || {}).map(([lang, name]) => `${name} (${lang})`);
  const defaultLabel = info.default ? `Default (${info.default})` : byLanguage.length ? `Default: ${byLanguage.join(", ")}` : "Default";
  const options = [el("option", { value: "" }, defaultLabel)];
  for (const name of info.voices) options.push(el("option", { value: name }, name));
  if (chosen && !info.voices.includes(chosen)) options.push(el("option", { value: chosen }, `${chosen} (not offered by this speech engine)`));
  $("role-voice").replaceChildren(...options);
  $("role-voice").value = chosen || "";
  $("voice-note").textContent = info.voices.length
    ? `Voices of the speech server (${info.engine}).`
    : "The built-in speech engine speaks one voice per language; voice names matter with an OpenAI-compatible speech server.";
}

function fillMemoryModels(settings) {
  const names = settings?.memory_models || [];
  const chosen = settings?.memory_model || "";
  const options = [el("option", { value: "" }, "none")];
  for (const name of names) options.push(el("option", { value: name }, name));
  if (chosen && !names.includes(chosen)) options.push(el("option", { value: chosen }, `${chosen} (unavailable)`));
  $("memory-model").replaceChildren(...options);
  $("memory-model").value = chosen;
}

function fillDocuments(bound) {
  $("no-documents").classList.toggle("hidden", state.documents.length > 0);
  $("role-documents").replaceChildren(
    ...state.documents.map((doc) =>
      el(
        "li",
        { "data-id": doc.id },
        el(
          "label",
          {},
          el("input", { type: "checkbox", class: "doc-bind", value: doc.id, checked: bound.has(doc.id) }),
          el("span", {}, doc.name),
        ),
      ),
    ),
  );
}

function fillForm(role, bound, settings, tm) {
  state.loaded = { role, bound, settings, tm };
  $("editor").classList.remove("hidden");
  $("stale").classList.add("hidden");
  $("editor-title").textContent = role ? role.name : "New role";
  $("editor-revision").textContent = role ? `revision ${role.revision}` : "";
  $("editor").dataset.roleId = role ? role.id : "";
  $("editor").dataset.revision = role ? String(role.revision) : "";
  $("role-name").value = role ? role.name : "";
  $("role-instructions").value = role ? role.instructions || "" : "";
  $("role-language").value = role?.language || "";
  fillVoices(role?.voice || null);
  $("role-memory").checked = role ? role.memory_enabled : true;
  $("role-failure-message").value = role?.failure_message || "";
  $("role-failure-silent").checked = role?.failure_message === "";
  $("role-agent-url").value = role?.agent_url || "";
  $("role-agent-secret").value = role?.agent_secret || "";
  fillMemoryModels(settings);
  $("tm-use").checked = tm.use;
  $("tm-generate").checked = tm.generate;
  fillDocuments(bound);
  $("tools-link").href = role ? `tools.html?role=${encodeURIComponent(role.id)}` : "tools.html";
  $("tools-link").parentElement.classList.toggle("hidden", !role);
  const deleteButton = $("delete-role");
  if (deleteButton) {
    deleteButton.classList.toggle("hidden", !role);
    deleteButton.disabled = Boolean(role?.is_default);
    deleteButton.title = role?.is_default ? "The default role cannot be deleted" : "";
  }
  $("role-fields").disabled = !state.admin;
  for (const item of $("roles").children) item.classList.toggle("current", Boolean(role) && item.dataset.id === role.id);
}

async function openRole(roleId) {
  let role, documents, bound, settings, tm;
  try {
    const id = encodeURIComponent(roleId);
    [role, { documents }, { documents: bound }, settings, tm] = await Promise.all([
      api(`/api/roles/${id}`),
      api("/api/documents"),
      api(`/api/roles/${id}/documents`),
      api(`/api/roles/${id}/memory/settings`),
      api("/api/thread-memory/defaults"),
    ]);
  } catch (error) {
    notice(`Could not open the role: ${errorText(error)}`, "bad");
    return;
  }
  state.documents = documents;
  remember(role.id);
  fillForm(role, new Set(bound.map((d) => d.id)), settings, tm);
}

async function newRole() {
  let documents, tm;
  try {
    [{ documents }, tm] = await Promise.all([api("/api/documents"), api("/api/thread-memory/defaults")]);
  } catch (error) {
    notice(`Could not start a new role: ${errorText(error)}`, "bad");
    return;
  }
  state.documents = documents;
  remember(null);
  fillForm(null, new Set(), { memory_models: state.loaded?.settings?.memory_models || [], memory_model: null, revision: 0 }, tm);
  $("role-name").focus();
}

function formValues() {
  return {
    name: $("role-name").value.trim(),
    instructions: $("role-instructions").value,
    language: $("role-language").value || null,
    voice: $("role-voice").value || null,
    memory_enabled: $("role-memory").checked,
    // null: the default apology in the turn's language; "": nothing (SPEC RT-11).
    failure_message: $("role-failure-silent").checked ? "" : $("role-failure-message").value.trim() || null,
  };
}

/** The role's own chat agent (docs/agent_protocol.md): its URL and the name of the tenant's tool secret sent as its token. */
function agentValues() {
  return {
    agent_url: $("role-agent-url").value.trim() || null,
    agent_secret: $("role-agent-secret").value.trim() || null,
  };
}

/** Rule 2: the "changed, reload" prompt; `savedRole`: the role itself was saved before a later part met a conflict. */
function showStale(savedRole = false) {
  $("stale-text").textContent = savedRole
    ? "The role was saved, but its memory settings changed since you opened it; that part was not saved."
    : "This role changed since you opened it (someone else saved it or switched its memory). Your edits were not saved.";
  $("stale").classList.remove("hidden");
  notice("");
}

function sameSet(a, b) {
  return a.size === b.size && [...a].every((x) => b.has(x));
}

// ------------------------------------------------------------------ saving (rules 2, 3)

async function save(event) {
  event.preventDefault();
  const { role, bound, settings, tm } = state.loaded;
  const values = formValues();
  let saved;
  try {
    const agent = agentValues();
    saved = role
      ? await api(`/api/roles/${encodeURIComponent(role.id)}`, { method: "PATCH", body: { expected_revision: role.revision, ...values, ...agent } })
      : await api("/api/roles", { method: "POST", body: values });
    if (!role && (agent.agent_url || agent.agent_secret)) {
      saved = await api(`/api/roles/${encodeURIComponent(saved.id)}`, { method: "PATCH", body: { expected_revision: saved.revision, ...agent } });
    }
  } catch (error) {
    if (error instanceof ApiError && error.code === "stale_revision") showStale();
    else notice(`Role not saved: ${errorText(error)}`, "bad");
    return;
  }
  const id = encodeURIComponent(saved.id);
  const parts = [];
  try {
    const ticked = new Set([...document.querySelectorAll("input.doc-bind:checked")].map((box) => box.value));
    if (!sameSet(ticked, bound)) {
      await api(`/api/roles/${id}/documents`, { method: "PUT", body: { document_ids: [...ticked] } });
      parts.push(`it can search ${plural(ticked.size, "document")}`);
    }
    const model = $("memory-model").value || null;
    if (model !== (settings?.memory_model || null)) {
      await api(`/api/roles/${id}/memory/settings`, { method: "PATCH", body: { expected: settings?.revision || 0, memory_model: model } });
      parts.push(model ? `memory model ${model}` : "no memory model");
    }
    const wanted = { use: $("tm-use").checked, generate: $("tm-generate").checked };
    if (wanted.use !== tm.use || wanted.generate !== tm.generate) {
      await api("/api/thread-memory/defaults", { method: "PUT", body: wanted });
      parts.push("thread-memory defaults changed for every role");
    }
  } catch (error) {
    await loadList();
    if (error instanceof ApiError && error.code === "stale_revision") {
      showStale(true);
      return;
    }
    notice(`Role “${saved.name}” saved, but not all of it: ${errorText(error)}`, "bad");
    return;
  }
  await loadList();
  await openRole(saved.id);
  notice(`Role “${saved.name}” ${role ? "saved" : "created"}${parts.length ? `; ${parts.join("; ")}` : ""}.`);
}

// ------------------------------------------------------------------ deleting (rule 4)

async function askDelete() {
  const role = state.loaded?.role;
  if (!role) return;
  let impact;
  try {
    impact = await api(`/api/roles/${encodeURIComponent(role.id)}/impact`);
  } catch (error) {
    notice(`Could not check what deleting would do: ${errorText(error)}`, "bad");
    return;
  }
  const threads = impact.threads;
  $("delete-impact").textContent =
    threads === 0
      ? `“${role.name}” has no conversations yet.`
      : `${plural(threads, "conversation")} with “${role.name}” will no longer be resumable (not even by their owners).`;
  $("delete-dialog").returnValue = "";
  $("delete-dialog").showModal();
}

async function onDeleteDialogClose() {
  const role = state.loaded?.role;
  if ($("delete-dialog").returnValue !== "delete" || !role) return;
  try {
    await api(`/api/roles/${encodeURIComponent(role.id)}?expected_revision=${role.revision}`, { method: "DELETE" });
  } catch (error) {
    if (error instanceof ApiError && error.code === "stale_revision") showStale();
    else notice(`Role not deleted: ${errorText(error)}`, "bad");
    return;
  }
  state.loaded = null;
  $("editor").classList.add("hidden");
  remember(null);
  await loadList();
  notice(`Role “${role.name}” deleted; its conversations can no longer be continued.`);
}

// ------------------------------------------------------------------ voice sample

async function playSample() {
  const button = $("play-sample");
  button.disabled = true;
  try {
    const response = await fetch(apiUrl("/api/voices/sample"), {
      method: "POST",
      headers: { Authorization: `Bearer ${token()}`, "Content-Type": "application/json" },
      body: JSON.stringify({ voice: $("role-voice").value || null, language: $("role-language").value || null }),
      cache: "no-store",
    });
    if (!response.ok) {
      const data = await response.json().catch(() => ({}));
      throw new ApiError(response.status, data.code || `http_${response.status}`, data.message || response.statusText, data);
    }
    const blob = await response.blob();
    const audio = $("sample-audio");
    if (audio.src) URL.revokeObjectURL(audio.src);
    audio.src = URL.createObjectURL(blob);
    audio.dataset.bytes = String(blob.size);
    await audio.play().catch(() => {}); // a browser may refuse autoplay; the sample stays loaded
  } catch (error) {
    notice(`No sample: ${errorText(error)}`, "bad");
  } finally {
    button.disabled = false;
  }
}

async function main() {
  const who = await signedIn("roles.html");
  if (!who) return;
  state.admin = isAdmin(who);
  try {
    state.voices = await api("/api/voices");
  } catch (error) {
    notice(`Could not list the voices: ${errorText(error)}`, "warn");
  }
  await loadList();
  const wanted = selectedId();
  const first = state.roles.find((r) => r.id === wanted) || state.roles.find((r) => r.is_default) || state.roles[0];
  if (first) await openRole(first.id);
  $("role-form").addEventListener("submit", save);
  $("reload").addEventListener("click", async () => {
    const role = state.loaded?.role;
    await loadList();
    if (role) await openRole(role.id);
    notice("Reloaded: this is the role as it is now.");
  });
  $("play-sample").addEventListener("click", playSample);
  if (state.admin) {
    $("new-role").addEventListener("click", newRole);
    $("delete-role").addEventListener("click", askDelete);
    $("delete-dialog").addEventListener("close", onDeleteDialogClose);
  }
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
