// The HTTP side every page shares: the bearer token, JSON calls, who is signed in, the page
// header with sign-out.
//
// The server prints its URL with the token in the fragment (`/#token=…`): a fragment never
// reaches the server or its logs. We move it into localStorage and strip it from the address
// bar; a second person pastes their token on the sign-in page (signin.html) instead. From then
// on it goes only into the Authorization header (and into the WebSocket's first message, see
// realtime.js), never into a URL query. Signing out forgets it in this browser (it stays valid
// until revoked: `openrealtime tokens revoke`).

const TOKEN_KEY = "openrealtime.token";

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message || code);
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/**
 * The runtime's origin when these pages are hosted elsewhere (web/config.js, or a
 * `<meta name="openrealtime-api-base">` tag); "" when the runtime serves them itself.
 */
export function apiBase() {
  const tag = document.querySelector('meta[name="openrealtime-api-base"]');
  const configured = (tag && tag.content) || (window.OPENREALTIME_CONFIG || {}).apiBase || "";
  return configured.replace(/\/+$/, "");
}

/** An API path (`/api/…`, `/v1/…`) on the runtime. */
export function apiUrl(path) {
  return apiBase() + path;
}

/** Take `#token=…` from the address bar into storage (once), then return the stored token. */
export function token() {
  const params = new URLSearchParams(location.hash.slice(1));
  const fromFragment = params.get("token");
  if (fromFragment) {
    localStorage.setItem(TOKEN_KEY, fromFragment);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", location.pathname + location.search + (rest ? `#${rest}` : ""));
  }
  return localStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  localStorage.setItem(TOKEN_KEY, value.trim());
  mePromise = null;
}

/** Forget the token in this browser (the server still accepts it until it is revoked). */
export function forgetToken() {
  localStorage.removeItem(TOKEN_KEY);
  mePromise = null;
}

/** Sign out: forget the token and go to the sign-in page. */
export function signOut() {
  forgetToken();
  location.assign("signin.html");
}

/** Call the API: JSON in and out; a non-2xx answer throws ApiError(status, code, message).
 * `bearer`: a token to use instead of the stored one (the sign-in page checks one first). */
export async function api(path, { method = "GET", body, keepalive = false, signal, bearer } = {}) {
  const headers = { Authorization: `Bearer ${bearer === undefined ? token() : bearer}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(apiUrl(path), {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    keepalive,
    signal,
    cache: "no-store",
  });
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const code = (data && data.code) || `http_${response.status}`;
    throw new ApiError(response.status, code, (data && data.message) || response.statusText, data);
  }
  return data;
}

/** A binary answer (a recording's audio) as a Blob; errors as `api` throws them. */
export async function apiBlob(path) {
  const response = await fetch(apiUrl(path), { headers: { Authorization: `Bearer ${token()}` }, cache: "no-store" });
  if (!response.ok) {
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    const code = (data && data.code) || `http_${response.status}`;
    throw new ApiError(response.status, code, (data && data.message) || response.statusText, data);
  }
  return response.blob();
}

let mePromise = null;

/** Who is signed in: GET /api/me → {tenant, user, role, token_id, scopes} (asked once). */
export function me() {
  if (!mePromise) {
    mePromise = api("/api/me");
    mePromise.catch(() => {
      mePromise = null;
    });
  }
  return mePromise;
}

/** The signed-in account as "tenant/user" (partitions local storage such as IndexedDB). */
export async function account() {
  const who = await me();
  return `${who.tenant}/${who.user}`;
}

/** Admins and owners edit roles, their bindings and role-level switches (docs/http_api.md). */
export function isAdmin(who) {
  return Boolean(who) && (who.role === "admin" || who.role === "owner");
}

/**
 * Start a page: draw the header, make sure someone is signed in and say who in the header.
 * Returns the caller (GET /api/me) or null when the page shows the sign-in panel instead (no
 * token, or one the server no longer accepts — that one is forgotten). Controls marked
 * `data-admin-only` are removed for members, `data-member-only` ones for admins; the server
 * refuses members' admin calls anyway (403).
 */
export async function signedIn(current) {
  renderHeader(current);
  if (!requireToken(current)) return null;
  let who;
  try {
    who = await me();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      forgetToken();
      renderHeader(current);
      requireToken(current, "This token is not accepted (unknown, expired or revoked). Paste another one.");
      return null;
    }
    throw error;
  }
  showWho(who);
  const hide = isAdmin(who) ? "[data-member-only]" : "[data-admin-only]";
  for (const node of document.querySelectorAll(hide)) node.remove();
  document.body.dataset.role = who.role;
  return who;
}

export async function listRoles() {
  const { roles } = await api("/api/roles");
  return roles;
}

const PAGES = [
  ["index.html", "Talk"],
  ["roles.html", "Roles"],
  ["history.html", "History"],
  ["memory.html", "Memory"],
  ["knowledge.html", "Knowledge"],
  ["tools.html", "Tools"],
  ["system.html", "System"],
];

/** Fill <header class="top"> with the brand, the navigation (current page marked) and a place
 * for who is signed in (`showWho`), or a sign-in link without a token. */
export function renderHeader(current) {
  const header = document.querySelector("header.top");
  if (!header) return;
  header.replaceChildren();
  const brand = el("span", { class: "brand" }, "OpenRealtime");
  const nav = el("nav");
  for (const [href, label] of PAGES) {
    const link = el("a", { href }, label);
    if (href === current) link.setAttribute("aria-current", "page");
    nav.append(link);
  }
  const who = el("div", { class: "who", id: "who" });
  if (!token() && current !== "signin.html") who.append(el("a", { href: signInHref(current), class: "button" }, "Sign in"));
  header.append(brand, nav, who);
}

/** Put "user · role" and a sign-out button into the header. */
export function showWho(who) {
  const box = document.getElementById("who");
  if (!box) return;
  const out = el("button", { type: "button", id: "sign-out" }, "Sign out");
  out.addEventListener("click", signOut);
  box.replaceChildren(
    el(
      "span",
      { class: "account", id: "who-user", title: `tenant ${who.tenant}` },
      el("strong", {}, who.user),
      " ",
      el("span", { class: `badge role-${who.role}`, id: "who-role" }, who.role),
    ),
    out,
  );
}

/** The sign-in page, coming back to `current` afterwards (a page name, never a token). */
export function signInHref(current) {
  return current && current !== "signin.html" ? `signin.html?next=${encodeURIComponent(current)}` : "signin.html";
}

/** Only our own pages are places to come back to after signing in. */
export function nextPage(wanted) {
  return PAGES.some(([href]) => href === wanted) ? wanted : "index.html";
}

/** Without a token, point to the sign-in page (or the printed address); returns false then. */
export function requireToken(current, why) {
  if (token()) return true;
  const main = document.querySelector("main");
  main.prepend(
    el(
      "div",
      { class: "panel", id: "signed-out" },
      el("h2", {}, "Sign in"),
      el(
        "p",
        { class: "muted" },
        why || "Open the address the server printed at start (it ends in #token=…), or sign in with a token of your own.",
      ),
      el("a", { href: signInHref(current), class: "button primary", id: "go-sign-in" }, "Sign in with a token"),
    ),
  );
  return false;
}

/** A tiny element builder: el("li", {class: "x"}, "text", child). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === false || value === null || value === undefined) continue;
    if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

/** Offer `data` as a JSON file download. */
export function downloadJson(filename, data) {
  const blob = new Blob([JSON.stringify(data, null, 2)], { type: "application/json" });
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: filename });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function errorText(error) {
  if (error instanceof ApiError) return `${error.message} (${error.code})`;
  return String((error && error.message) || error);
}

/** "1 message", "2 messages". */
export function plural(count, word) {
  return `${count} ${word}${count === 1 ? "" : "s"}`;
}
