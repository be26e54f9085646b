// The tools page (SPEC TOOL-1…3, TOOL-6, docs/http_api.md#tools): for one role, its tools, its
// MCP servers, the rules its judge reads and the permissions (grants) people gave it. Admins and
// owners declare HTTP tools (parameters as a JSON schema box) and MCP servers (headers by
// secret name), set write-only secrets, add rules, activate the ones
// the agent proposed, retire them, and revoke any permission. Members see the tools and active
// rules read-only, and only the permissions they gave or that apply in their own threads,
// which they may revoke; the server refuses everything else anyway (403, or 404 for a grant
// they may not see).

import { api, el, errorText, formatTime, isAdmin, listRoles, signedIn } from "./api.js";

const $ = (id) => document.getElementById(id);
const roleId = () => $("role").value;
const rolePath = (tail) => `/api/roles/${encodeURIComponent(roleId())}/${tail}`;

let admin = false;

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

/** Run an API change, then reload the page's lists: the notice says `done` (or what `work`
 * returned); a refusal becomes the notice instead. */
async function change(done, work) {
  try {
    const said = await work();
    notice(typeof said === "string" ? said : done);
  } catch (error) {
    notice(errorText(error), "bad");
  }
  await load();
}

// ------------------------------------------------------------------ tools

function toolItem(tool) {
  const head = el(
    "div",
    { class: "row spread" },
    el("div", { class: "row" }, el("strong", {}, tool.name), el("span", { class: "badge" }, tool.kind)),
    admin && tool.kind === "http"
      ? el("button", {
          type: "button",
          class: "danger delete",
          onclick: () => {
            if (!confirm(`Delete the tool “${tool.name}”?`)) return;
            change(`Tool “${tool.name}” deleted.`, () => api(rolePath(`tools/${encodeURIComponent(tool.name)}`), { method: "DELETE" }));
          },
        }, "Delete")
      : null,
  );
  const lines = [];
  if (tool.kind === "http") {
    lines.push(el("div", { class: "small" }, el("code", {}, tool.method), " ", tool.url_template));
    if (tool.description) lines.push(el("div", { class: "muted small" }, tool.description));
    const secrets = tool.headers.map((h) => `${h.header} ← ${h.secret}`).join(", ");
    const facts = [`timeout ${tool.timeout_s} s`, tool.cancellable ? "cancellable" : "not cancellable"];
    if (tool.target) facts.push(`target: ${tool.target}`);
    if (secrets) facts.push(`secret headers: ${secrets}`);
    lines.push(el("div", { class: "muted small" }, facts.join(" · ")));
  } else {
    lines.push(el("div", { class: "muted small" }, "built in"));
  }
  return el("li", { "data-name": tool.name }, head, ...lines);
}

async function loadTools() {
  const { tools, allowed_hosts: hosts } = await api(rolePath("tools"));
  $("tools").replaceChildren(...tools.map(toolItem));
  if (admin) {
    $("hosts").textContent = hosts.length
      ? `Allowed hosts: ${hosts.join(", ")}`
      : "No host is allowed yet: set OPENREALTIME_TOOL_HOSTS on the server to declare HTTP tools.";
  }
}

function toolBody() {
  let parameters;
  try {
    parameters = JSON.parse($("tool-parameters").value);
  } catch (error) {
    throw new Error(`The parameters are not JSON: ${error.message}`);
  }
  const body = {
    description: $("tool-description").value,
    parameters,
    method: $("tool-method").value,
    url_template: $("tool-url").value.trim(),
    timeout_s: Number($("tool-timeout").value || "10"),
    cancellable: $("tool-cancellable").checked,
    target: $("tool-target").value.trim() || null,
    headers: [],
  };
  const header = $("tool-header").value.trim();
  const secret = $("tool-header-secret").value;
  if (header || secret) body.headers.push({ header, secret, prefix: $("tool-header-prefix").value });
  return body;
}

function saveTool(event) {
  event.preventDefault();
  const name = $("tool-name").value.trim();
  change(`Tool “${name}” saved.`, async () => {
    await api(rolePath(`tools/${encodeURIComponent(name)}`), { method: "PUT", body: toolBody() });
    $("tool-name").value = "";
  });
}

// ------------------------------------------------------------------ MCP servers

function approvalText(value) {
  if (value === "never") return "never asks";
  if (value === "always") return "asks before every call";
  if (value && value.never && value.never.read_only) return "asks unless read-only";
  return "asks as configured";
}

function mcpItem(server) {
  const head = el(
    "div",
    { class: "row spread" },
    el("div", { class: "row" }, el("strong", {}, server.server_label), el("span", { class: "badge" }, "mcp")),
    admin
      ? el("button", {
          type: "button",
          class: "danger delete",
          onclick: () => {
            if (!confirm(`Delete the MCP server “${server.server_label}”?`)) return;
            change(`MCP server “${server.server_label}” deleted.`, () => api(rolePath(`mcp_servers/${encodeURIComponent(server.server_label)}`), { method: "DELETE" }));
          },
        }, "Delete")
      : null,
  );
  const facts = [approvalText(server.require_approval)];
  const allowed = server.allowed_tools && server.allowed_tools.tool_names;
  facts.push(allowed ? `tools: ${allowed.join(", ")}` : "all its tools");
  const secrets = server.headers.map((h) => `${h.header} ← ${h.secret}`).join(", ");
  if (secrets) facts.push(`secret headers: ${secrets}`);
  return el(
    "li",
    { "data-label": server.server_label },
    head,
    el("div", { class: "small" }, server.server_url),
    el("div", { class: "muted small" }, facts.join(" · ")),
  );
}

async function loadMcpServers() {
  const { mcp_servers: servers } = await api(rolePath("mcp_servers"));
  $("mcp-servers").replaceChildren(...servers.map(mcpItem));
  $("mcp-empty").classList.toggle("hidden", servers.length > 0);
}

function mcpBody() {
  const approval = $("mcp-approval").value;
  const names = $("mcp-tools").value.split(",").map((n) => n.trim()).filter(Boolean);
  const body = {
    server_url: $("mcp-url").value.trim(),
    require_approval: approval === "read_only" ? { never: { read_only: true } } : approval,
    headers: [],
  };
  if (names.length) body.allowed_tools = names;
  const header = $("mcp-header").value.trim();
  const secret = $("mcp-header-secret").value;
  if (header || secret) body.headers.push({ header, secret, prefix: $("mcp-header-prefix").value });
  return body;
}

function saveMcpServer(event) {
  event.preventDefault();
  const label = $("mcp-label").value.trim();
  change(`MCP server “${label}” saved.`, async () => {
    await api(rolePath(`mcp_servers/${encodeURIComponent(label)}`), { method: "PUT", body: mcpBody() });
    $("mcp-label").value = "";
  });
}

// ------------------------------------------------------------------ secrets (admins)

async function loadSecrets() {
  const { secrets } = await api("/api/tool-secrets");
  $("secrets").replaceChildren(
    ...secrets.map(({ name }) =>
      el(
        "li",
        { "data-name": name },
        el(
          "div",
          { class: "row spread" },
          el("code", {}, name),
          el("button", {
            type: "button",
            class: "danger delete",
            onclick: () => change(`Secret “${name}” deleted.`, () => api(`/api/tool-secrets/${encodeURIComponent(name)}`, { method: "DELETE" })),
          }, "Delete"),
        ),
      ),
    ),
  );
  for (const picker of [$("tool-header-secret"), $("mcp-header-secret")]) {
    const chosen = picker.value;
    picker.replaceChildren(el("option", { value: "" }, "— secret —"), ...secrets.map(({ name }) => el("option", { value: name, selected: name === chosen }, name)));
  }
}

function saveSecret(event) {
  event.preventDefault();
  const name = $("secret-name").value.trim();
  change(`Secret “${name}” saved.`, async () => {
    await api(`/api/tool-secrets/${encodeURIComponent(name)}`, { method: "PUT", body: { value: $("secret-value").value } });
    $("secret-name").value = "";
    $("secret-value").value = "";
  });
}

// ------------------------------------------------------------------ rules

function setRuleStatus(rule, status, done) {
  return change(done, () => api(rolePath(`rules/${encodeURIComponent(rule.id)}`), { method: "PATCH", body: { expected_version: rule.version, status } }));
}

function ruleItem(rule) {
  const actions = [];
  if (admin && rule.status === "proposed") {
    actions.push(el("button", { type: "button", class: "primary activate", onclick: () => setRuleStatus(rule, "active", "Rule activated.") }, "Activate"));
  }
  if (admin && rule.status !== "retired") {
    actions.push(el("button", { type: "button", class: "danger retire", onclick: () => setRuleStatus(rule, "retired", "Rule retired.") }, "Retire"));
  }
  const kind = rule.status === "active" ? "badge ok" : rule.status === "proposed" ? "badge warn" : "badge";
  const by = rule.author.kind === "role" ? "proposed by the assistant" : `by ${rule.author.id}`;
  return el(
    "li",
    { "data-id": rule.id, "data-status": rule.status },
    el("div", { class: "row spread" }, el("span", { class: "grow rule-text" }, rule.text), el("div", { class: "row" }, el("span", { class: `${kind} status` }, rule.status), ...actions)),
    el("div", { class: "muted small" }, `${by} · version ${rule.version} · ${formatTime(rule.updated_at)}`),
  );
}

async function loadRules() {
  const { rules } = await api(rolePath("rules"));
  $("rules").replaceChildren(...rules.map(ruleItem));
  $("rules-empty").classList.toggle("hidden", rules.length > 0);
}

function addRule(event) {
  event.preventDefault();
  change("Rule added.", async () => {
    await api(rolePath("rules"), { method: "POST", body: { text: $("rule-text").value } });
    $("rule-text").value = "";
  });
}

// ------------------------------------------------------------------ grants

const SCOPES = { once: "once", thread: "in one conversation", lifetime: "always" };

function grantItem(grant) {
  const what = grant.target === "*" ? grant.action : `${grant.action} → ${grant.target}`;
  const facts = [SCOPES[grant.scope] || grant.scope, `by ${grant.granted_by.kind} ${grant.granted_by.id}`, formatTime(grant.created_at)];
  if (grant.thread_id) facts.splice(1, 0, `thread ${grant.thread_id}`);
  if (grant.arguments) facts.push(`only with ${JSON.stringify(grant.arguments)}`);
  if (grant.parent) facts.push("derived");
  const revoke =
    grant.status === "active"
      ? el("button", {
          type: "button",
          class: "danger revoke",
          onclick: () =>
            change("", async () => {
              const { revoked } = await api(rolePath(`grants/${encodeURIComponent(grant.id)}/revoke`), { method: "POST" });
              return `${revoked.length} permission(s) revoked.`;
            }),
        }, "Revoke")
      : null;
  return el(
    "li",
    { "data-id": grant.id, "data-status": grant.status },
    el(
      "div",
      { class: "row spread" },
      el("div", { class: "row" }, el("span", { class: `badge ${grant.effect === "allow" ? "ok" : "warn"}` }, grant.effect), el("strong", {}, what)),
      el("div", { class: "row" }, grant.status === "active" ? null : el("span", { class: "badge" }, grant.status), revoke),
    ),
    el("div", { class: "muted small" }, facts.join(" · ")),
  );
}

async function loadGrants() {
  const status = $("grant-status").value;
  const { grants } = await api(rolePath(`grants${status ? `?status=${status}` : ""}`));
  $("grants").replaceChildren(...grants.map(grantItem));
  $("grants-empty").classList.toggle("hidden", grants.length > 0);
}

// ------------------------------------------------------------------ the page

async function load() {
  try {
    await Promise.all([loadTools(), loadMcpServers(), loadRules(), loadGrants(), admin ? loadSecrets() : null]);
  } catch (error) {
    notice(`Could not load: ${errorText(error)}`, "bad");
  }
}

async function main() {
  const who = await signedIn("tools.html");
  if (!who) return;
  admin = isAdmin(who);
  const roles = await listRoles();
  const keep = roles.find((r) => r.is_default)?.id;
  $("role").replaceChildren(...roles.map((role) => el("option", { value: role.id, selected: role.id === keep }, role.name)));
  $("role").addEventListener("change", () => {
    notice("");
    load();
  });
  $("refresh").addEventListener("click", load);
  $("grant-status").addEventListener("change", load);
  if (admin) {
    $("tool-form").addEventListener("submit", saveTool);
    $("mcp-form").addEventListener("submit", saveMcpServer);
    $("secret-form").addEventListener("submit", saveSecret);
    $("rule-form").addEventListener("submit", addRule);
  }
  await load();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
