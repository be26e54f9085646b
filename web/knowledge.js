// The knowledge page (SPEC WEB-3, KB-1, KB-2): create or import documents (bound to the chosen
// role), choose which documents a role can search, and test retrieval the way the assistant's
// knowledge_search tool would (hits and the exact tool result). Admins and owners also bind
// documents to roles and create, edit and delete roles; members see which documents a role can
// search but none of those controls (the server refuses them anyway: 403).

import { api, el, errorText, formatTime, isAdmin, listRoles, plural, signedIn } from "./api.js";

const $ = (id) => document.getElementById(id);
const MAX_IMPORT_BYTES = 2 * 1024 * 1024;

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

const roleId = () => $("role").value;

async function load() {
  let documents;
  let bound;
  try {
    ({ documents } = await api("/api/documents"));
    bound = new Set((await api(`/api/roles/${encodeURIComponent(roleId())}/documents`)).documents.map((d) => d.id));
  } catch (error) {
    notice(`Could not load documents: ${errorText(error)}`, "bad");
    return;
  }
  $("empty").classList.toggle("hidden", documents.length > 0);
  $("documents").dataset.role = roleId(); // whose bindings the checkboxes show
  $("documents").replaceChildren(
    ...documents.map((doc) => {
      const box = admin
        ? el("input", { type: "checkbox", class: "bind", value: doc.id, checked: bound.has(doc.id) })
        : null;
      const searchable = !admin && bound.has(doc.id) ? el("span", { class: "badge ok bound" }, "this role searches it") : null;
      const remove = el("button", { type: "button", class: "danger" }, "Delete");
      remove.addEventListener("click", async () => {
        if (!confirm(`Delete “${doc.name}”?`)) return;
        try {
          await api(`/api/documents/${encodeURIComponent(doc.id)}`, { method: "DELETE" });
        } catch (error) {
          notice(errorText(error), "bad");
        }
        await load();
      });
      return el(
        "li",
        { "data-id": doc.id },
        el(
          "div",
          { class: "row spread" },
          el("label", { class: "grow" }, box, el("strong", {}, doc.name)),
          el("div", { class: "row" }, searchable, remove),
        ),
        el("div", { class: "muted small" }, `${plural(doc.chars, "character")} · ${plural(doc.chunks, "chunk")} · updated ${formatTime(doc.updated_at)}`),
      );
    }),
  );
}

async function createDocument(event) {
  event.preventDefault();
  try {
    await api("/api/documents", {
      method: "POST",
      body: { name: $("doc-name").value, text: $("doc-text").value, role_id: roleId() },
    });
    $("doc-name").value = "";
    $("doc-text").value = "";
    notice("Document created and bound to the role.");
  } catch (error) {
    notice(`Not created: ${errorText(error)}`, "bad");
  }
  await load();
}

async function importFile() {
  const file = $("doc-file").files[0];
  if (!file) return;
  if (file.size > MAX_IMPORT_BYTES) {
    notice(`That file is larger than ${MAX_IMPORT_BYTES / 1024 / 1024} MiB.`, "bad");
    return;
  }
  try {
    const content = await file.text();
    const doc = await api("/api/documents/import", {
      method: "POST",
      body: { filename: file.name, content, role_id: roleId() },
    });
    notice(`Imported “${doc.name}” and bound it to the role.`);
  } catch (error) {
    notice(`Not imported: ${errorText(error)}`, "bad");
  }
  $("doc-file").value = "";
  await load();
}

async function saveBindings() {
  const ids = [...document.querySelectorAll("input.bind:checked")].map((box) => box.value);
  try {
    await api(`/api/roles/${encodeURIComponent(roleId())}/documents`, { method: "PUT", body: { document_ids: ids } });
    notice(`The role can now search ${ids.length} document(s).`);
  } catch (error) {
    notice(`Not saved: ${errorText(error)}`, "bad");
  }
  await load();
}

async function search(event) {
  event.preventDefault();
  let result;
  try {
    result = await api("/api/knowledge/search", { method: "POST", body: { query: $("query").value, role_id: roleId() } });
  } catch (error) {
    notice(`Search failed: ${errorText(error)}`, "bad");
    return;
  }
  const hits = result.hits.map((hit) =>
    el(
      "li",
      { class: "hit" },
      el("div", { class: "row spread" }, el("strong", {}, hit.document_name), el("span", { class: "badge" }, `score ${Number(hit.score).toFixed(2)}`)),
      el("div", { class: "small" }, hit.chunk_text),
    ),
  );
  $("hits").replaceChildren(...(hits.length ? hits : [el("li", { class: "muted" }, "No match in this role's documents (try words from the title or text).")]));
  $("tool-result").textContent = result.tool_result || "";
  $("tool-result-box").classList.toggle("hidden", !result.tool_result);
}

let admin = false;
let roles = [];

/** Fill the role picker (keeping `selected`, else the default role) and the role editor. */
async function loadRoles(selected) {
  roles = await listRoles();
  const keep = roles.some((r) => r.id === selected) ? selected : roles.find((r) => r.is_default)?.id;
  $("role").replaceChildren(...roles.map((role) => el("option", { value: role.id, selected: role.id === keep }, role.name)));
  showRole();
}

function showRole() {
  if (!admin) return;
  const role = roles.find((r) => r.id === roleId());
  if (!role) return;
  $("role-name").value = role.name;
  $("role-instructions").value = role.instructions || "";
  $("role-delete").disabled = role.is_default;
  $("role-delete").title = role.is_default ? "The default role cannot be deleted" : "";
}

async function saveRole(event) {
  event.preventDefault();
  try {
    const role = await api(`/api/roles/${encodeURIComponent(roleId())}`, {
      method: "PATCH",
      body: { name: $("role-name").value, instructions: $("role-instructions").value },
    });
    notice(`Role “${role.name}” saved.`);
    await loadRoles(role.id);
  } catch (error) {
    notice(`Role not saved: ${errorText(error)}`, "bad");
  }
}

async function createRole(event) {
  event.preventDefault();
  try {
    const role = await api("/api/roles", { method: "POST", body: { name: $("new-role-name").value } });
    $("new-role-name").value = "";
    notice(`Role “${role.name}” created; it searches no documents until you bind some.`);
    await loadRoles(role.id);
  } catch (error) {
    notice(`Role not created: ${errorText(error)}`, "bad");
    return;
  }
  await load();
}

async function deleteRole() {
  const role = roles.find((r) => r.id === roleId());
  if (!role || !confirm(`Delete the role “${role.name}”? Conversations in it can no longer be continued.`)) return;
  try {
    await api(`/api/roles/${encodeURIComponent(role.id)}`, { method: "DELETE" });
    notice(`Role “${role.name}” deleted.`);
  } catch (error) {
    notice(`Role not deleted: ${errorText(error)}`, "bad");
  }
  await loadRoles(roleId());
  await load();
}

async function main() {
  const who = await signedIn("knowledge.html");
  if (!who) return;
  admin = isAdmin(who);
  await loadRoles();
  $("role").addEventListener("change", () => {
    $("hits").replaceChildren();
    showRole();
    load();
  });
  $("create-form").addEventListener("submit", createDocument);
  $("doc-file").addEventListener("change", importFile);
  $("search-form").addEventListener("submit", search);
  if (admin) {
    $("save-bindings").addEventListener("click", saveBindings);
    $("role-edit-form").addEventListener("submit", saveRole);
    $("role-create-form").addEventListener("submit", createRole);
    $("role-delete").addEventListener("click", deleteRole);
  }
  await load();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
