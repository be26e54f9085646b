// The HTTP side every page shares: the bearer token, JSON calls, the account, the page header.
//
// The server prints its URL with the token in the fragment (`/#token=…`): a fragment never
// reaches the server or its logs. We move it into localStorage and strip it from the address
// bar; from then on it goes only into the Authorization header (and into the WebSocket's
// first message, see realtime.js), never into a URL query.

const TOKEN_KEY = "openrealtime.token";

export class ApiError extends Error {
  constructor(status, code, message, body) {
    super(message || code);
    this.status = status;
    this.code = code;
    this.body = body;
  }
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
  accountPromise = null;
}

/** Call the API: JSON in and out; a non-2xx answer throws ApiError(status, code, message). */
export async function api(path, { method = "GET", body, keepalive = false, signal } = {}) {
  const headers = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
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

let accountPromise = null;

/** The signed-in account as "tenant/user" (partitions local storage such as IndexedDB). */
export function account() {
  if (!accountPromise) {
    accountPromise = api("/api/me").then((me) => `${me.tenant}/${me.user}`);
    accountPromise.catch(() => {
      accountPromise = null;
    });
  }
  return accountPromise;
}

export async function listRoles() {
  const { roles } = await api("/api/roles");
  return roles;
}

const PAGES = [
  ["index.html", "Talk"],
  ["history.html", "History"],
  ["memory.html", "Memory"],
  ["knowledge.html", "Knowledge"],
];

/** Fill <header class="top"> with the brand and the navigation; mark the current page. */
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
  header.append(brand, nav);
}

/** Without a token, show how to get one and a field to paste it; returns false then. */
export function requireToken() {
  if (token()) return true;
  const main = document.querySelector("main");
  const input = el("input", { type: "password", placeholder: "token", class: "grow", id: "token-input" });
  const save = el("button", { class: "primary" }, "Use token");
  save.addEventListener("click", () => {
    if (input.value.trim()) {
      setToken(input.value);
      location.reload();
    }
  });
  main.prepend(
    el(
      "div",
      { class: "panel" },
      el("h2", {}, "Sign in"),
      el(
        "p",
        { class: "muted" },
        "Open the address the server printed at start (it ends in #token=…), or paste the token here.",
      ),
      el("div", { class: "row" }, input, save),
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
