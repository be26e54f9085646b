// The sign-in page: a person pastes their token; the page asks GET /api/me with it before
// keeping it (localStorage, like the token from the printed address), then goes back to the
// page that sent them here (`?next=`, a page name). Signing out forgets the token here.

import {
  ApiError,
  api,
  el,
  errorText,
  forgetToken,
  me,
  nextPage,
  renderHeader,
  setToken,
  showWho,
  token,
} from "./api.js";

const $ = (id) => document.getElementById(id);

function notice(text, kind = "") {
  const box = $("notice");
  box.className = `banner ${kind}`.trim();
  box.textContent = text;
  box.classList.toggle("hidden", !text);
}

const next = nextPage(new URLSearchParams(location.search).get("next"));

async function showCurrent() {
  if (!token()) return;
  let who;
  try {
    who = await me();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      forgetToken();
      renderHeader("signin.html");
      notice("The token kept in this browser is no longer accepted; sign in again.", "warn");
      return;
    }
    throw error;
  }
  showWho(who);
  $("current-text").replaceChildren(
    "You are signed in as ",
    el("strong", {}, who.user),
    ` (${who.role} of the tenant ${who.tenant}).`,
  );
  $("continue").href = next;
  $("current").classList.remove("hidden");
  $("form-title").textContent = "Sign in as someone else";
}

async function signIn(event) {
  event.preventDefault();
  const pasted = $("token-input").value.trim();
  if (!pasted) return;
  try {
    await api("/api/me", { bearer: pasted });
  } catch (error) {
    const status = error instanceof ApiError ? error.status : 0;
    notice(
      status === 401
        ? "This token is not accepted (unknown, expired or revoked, or its user is disabled)."
        : status === 403
          ? "This token may not use the pages (a metrics token is for scraping only)."
          : `Could not sign in: ${errorText(error)}`,
      "bad",
    );
    return;
  }
  $("token-input").value = "";
  setToken(pasted);
  location.assign(next);
}

async function main() {
  renderHeader("signin.html");
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out-here").addEventListener("click", () => {
    forgetToken();
    location.reload();
  });
  await showCurrent();
  document.body.dataset.ready = "true";
}

main().catch((error) => notice(`The page failed to start: ${errorText(error)}`, "bad"));
