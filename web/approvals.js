// The talk page's tool approvals (SPEC TOOL-4, issue 19): a tool call the agent may not make
// without asking is shown with Yes / Always / No while the agent asks in voice.
//
// Theory of operation
// 1. The server announces a request as a GA conversation item `mcp_approval_request`
//    (id, name, arguments) and settles it with an `mcp_approval_response` item, whoever
//    answered (these buttons, the person's voice, another client) or when nobody did
//    (`reason: "timeout"` / `"withdrawn"`). The panel shows exactly the requests announced and
//    not yet settled; a settled one disappears.
// 2. A button sends `conversation.item.create` with `mcp_approval_response`: Yes approves this
//    call, Always approves with our extension `scope: "lifetime"`, No declines (for this thread).
//    Who answers is the signed-in person: the page never says who grants. The server continues
//    the turn by itself; no `response.create` follows.
// 3. A button works once: the card's buttons are disabled as soon as one is pressed; a late
//    answer to a settled request gets the server's `item_not_found`, shown as any error.
// 4. Arguments are shown as text, never as HTML.

import { el } from "./api.js";

export class ApprovalPanel {
  /** @param {HTMLElement} container  @param {(message: object) => boolean} send */
  constructor(container, send) {
    this.container = container;
    this.send = send;
    this.cards = new Map(); // request id → card element (rule 1)
  }

  /** Feed every server event; only approval items are read. */
  onEvent(event) {
    if (event.type !== "conversation.item.added") return;
    const item = event.item || {};
    if (item.type === "mcp_approval_request") this._show(item);
    else if (item.type === "mcp_approval_response") this._settle(item.approval_request_id);
  }

  /** The connection ended: nothing shown can be answered any more. */
  clear() {
    for (const id of [...this.cards.keys()]) this._settle(id);
  }

  _show(item) {
    if (this.cards.has(item.id)) return;
    let args = item.arguments || "";
    try {
      args = Object.entries(JSON.parse(args)).map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`).join(", ");
    } catch {
      // shown as sent
    }
    const buttons = [];
    const answer = (approve, scope) => () => {
      for (const b of buttons) b.disabled = true; // rule 3
      const response = { type: "mcp_approval_response", approval_request_id: item.id, approve };
      if (scope) response.scope = scope;
      this.send({ type: "conversation.item.create", item: response });
    };
    buttons.push(
      el("button", { type: "button", class: "approve", onclick: answer(true, null) }, "Yes"),
      el("button", { type: "button", class: "approve-always", onclick: answer(true, "lifetime") }, "Always"),
      el("button", { type: "button", class: "decline", onclick: answer(false, null) }, "No"),
    );
    const card = el("div", { class: "approval", "data-request": item.id, role: "group", "aria-label": "Tool approval" },
      el("div", { class: "approval-text" }, "May I use ", el("strong", {}, item.name || "a tool"), args ? ` (${args})?` : "?"),
      el("div", { class: "approval-buttons" }, ...buttons),
    );
    this.cards.set(item.id, card);
    this.container.append(card);
    this.container.classList.remove("hidden");
  }

  _settle(id) {
    const card = this.cards.get(id);
    if (!card) return;
    card.remove();
    this.cards.delete(id);
    if (!this.cards.size) this.container.classList.add("hidden");
  }
}
