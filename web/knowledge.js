// The knowledge page (SPEC WEB-3, KB-1, KB-2): create or import documents (bound to the chosen
// role), choose which documents a role can search, and test retrieval the way the assistant's
// knowledge_search tool would (hits and the exact tool result).

import { api, el, errorText, formatTime, listRoles, plural, renderHeader, requireToken } from "./api.js";

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
      const box = el("input", { type: "checkbox", class: "bind", value: doc.id, checked: bound.has(doc.id) });
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
          remove,
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

async function main() {
  renderHeader("knowledge.html");
  if (!requireToken()) return;
  for (const role of await listRoles()) {
    const option = el("option", { value: role.id }, role.name);
    if (role.is_default) option.selected = true;
    $("role").append(option);
  }
  $("role").addEventListener("change", () => {
    $("hits").replaceChildren();
    load();
  });
  $("create-form").addEventListener("submit", createDocument);
  $("doc-file").addEventListener("change", importFile);
  $("save-bindings").addEventListener("click", saveBindings);
  $("search-form").addEventListener("submit", search);
  await load();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
