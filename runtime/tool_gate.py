"""Tool permissions in a voice session (SPEC TOOL-4, TOOL-5): the gate every call goes through.

Theory of operation
-------------------
Rule 1. One ``ToolGate`` per session, built at its start: a ``ToolRegistry`` of the built-ins,
        the role's HTTP tools (``Services.tool_catalog``, read once, on first use) and the
        client's declared functions (``set_client_tools`` after each ``session.update``). The
        built-ins — ``knowledge_search`` (reads the person's own documents), ``confide`` (the
        agent's note to role memory), ``end_conversation`` and a transport's own (a phone
        call's ``end_call``, ``ToolRegistry.add_builtin``) — are read-only or internal and
        always allowed; a call of a tool the registry does not hold is refused (it runs
        nowhere, not even on the client).
Rule 2. Every other call is bound to the generation that made it (``CallOrigin``) and decided
        before anything runs: invalid arguments → an error result, no decision; then
        ``ToolDecider.decide`` (grants, rules). ``allow`` runs it — an HTTP tool on the
        services' one ``HttpToolExecutor``, a client tool by the client; ``deny`` gives the
        brain "Not permitted: <the quoted rule, or that the person said no>" and nothing runs;
        no decision for a client function hands it to the client when
        ``tool_client_undecided`` is ``allow`` (the default: the client runs its own functions
        for the person in front of it, so OpenAI SDK clients work unchanged; journaled as
        decided by ``client``); otherwise no decision asks the person
        (``runtime.tool_confirm``): the question is spoken and
        ends the response (tool loop Rule 7), and the request is sent as a GA
        ``mcp_approval_request`` item. One question at a time: a second undecided call while
        one waits is refused ("another request is waiting").
Rule 3. An answer — the person's next words (``answer``: ``classify_answer``) or an
        ``mcp_approval_response`` item (``approve``) — settles the question once and becomes a
        grant by the session's authenticated person, never a field a client or the model
        writes (``runtime.tool_confirm`` Rule 5). Then the call is decided again (the new grant
        decides; a ``once`` grant is used up by it) and, when allowed, runs; the turn continues
        in a new response with its result (an approved client call is handed to the client
        instead). An approval item's optional ``rule`` is saved as the person's rule of the
        role (active at once: ``tools.rules`` rule 2). Words that are no answer withdraw the
        question (``tool_confirm`` rule 4) and are a turn of their own; so does a cancel of the
        response that asked. No answer within ``tool_confirm_timeout_s`` is a no for this call
        only (no grant); the turn continues with "the person did not answer".
Rule 4. Interruptions (TOOL-5): cancelling a response cancels its task, and with it a call
        still being decided (it never starts) and a running call of a ``cancellable`` tool
        (its HTTP request is aborted). A call of a tool that is not cancellable runs to its
        end: its result is journaled (``stale``: true) and never spoken, never given to a
        later response as that response's result.
Rule 5. Journal: each call's decision (effect, decided_by, grant id or quoted rules, cached,
        the question's request id) rides on its ``tool_call`` event (``journal_fields``); a
        settled question's result is a ``tool_result`` event carrying the answer, who gave it
        and the grant made. Logs name tools and outcomes only — never arguments, questions,
        answers or results.
Rule 6. Bounded: the per-call decision records kept for the journal and the client are at
        most ``MAX_CALLS_KEPT``; one confirmation; one timer.
Rule 7. MCP servers (SPEC TOOL-6): the session's and the role's (read with the HTTP tools,
        header values from the tenant's secrets) are ``runtime.mcp_servers``' — listed once
        each, their tools in the registry and the offered specs. A call is decided like any
        other (grants, rules; a deny always wins); then a tool the declaration's
        ``require_approval`` covers runs only on the person's grant — anything else, a rule's
        allow included, asks (the request's ``server_label`` is the server's) — and a tool it
        waives runs unless denied (journaled as decided by ``client`` when nothing decided).
        ``mcp_error`` tells the response's ``mcp_call`` item why a call failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any, Literal

from journal.events import EventKind, NewEvent, ThreadRef
from journal.store import JournalStore
from pipeline import events as ev
from pipeline.loop import retrieved
from pipeline.response import CallOrigin, Continuation, ToolGateHost
from plugins.brain.tool_loop import PROCEED, Verdict
from plugins.brain.tool_loop import ToolGate as GateFn
from plugins.contracts import ToolCall, ToolResult, ToolSpec
from runtime.mcp_servers import McpServers, with_secret_headers
from runtime.tool_confirm import (
    BUSY,
    DECLINED,
    NO_ANSWER,
    UNAVAILABLE,
    WITHDRAWN,
    Answer,
    Confirmation,
    ConfirmState,
    classify_answer,
    grant_for,
    question_for,
)
from tools.catalog import ToolCatalog
from tools.decide import ToolDecider
from tools.errors import InvalidArguments, InvalidTool, ToolError, ToolsUnavailable, UnknownTool
from tools.grants import GrantStore
from tools.http_tool import HttpToolExecutor
from tools.mcp import McpServer
from tools.registry import ClientTool, HttpTool, McpTool, Tool, ToolRegistry
from tools.rules import Author, RuleStore

log = logging.getLogger(__name__)

MAX_CALLS_KEPT = 256


class ApprovalNotFound(LookupError):
    """No question with this id waits for an answer."""


class ToolGate:
    """One session's tool permissions (module docstring); implements ``ToolGateHook``."""

    def __init__(
        self,
        *,
        decider: ToolDecider,
        grants: GrantStore,
        rules: RuleStore,
        catalog: ToolCatalog,
        executor: HttpToolExecutor,
        journal: JournalStore,
        thread: ThreadRef,
        role_id: str,
        person: str,
        voice_session_id: str,
        allowed_hosts: frozenset[str],
        language: str | None,
        confirm_timeout_s: float,
        client_undecided: Literal["allow", "ask"] = "allow",
        mcp_timeout_s: float = 10.0,
        max_result_chars: int = 16_000,
    ) -> None:
        self.decider = decider
        self.grants = grants
        self.rules = rules
        self.catalog = catalog
        self.executor = executor
        self.journal = journal
        self.thread = thread
        self.role_id = role_id
        self.person = person
        """The authenticated user of the session: who grants (Rule 3)."""
        self.voice_session_id = voice_session_id
        self.language = language
        self.confirm_timeout_s = confirm_timeout_s
        self.client_undecided = client_undecided
        """What a client function no grant or rule decides gets (Rule 2)."""
        self.registry = ToolRegistry(allowed_hosts)
        self._loaded: asyncio.Task[None] | None = None
        self._http_specs: tuple[ToolSpec, ...] = ()
        self._calls: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._to_client: OrderedDict[str, None] = OrderedDict()
        self._pending: Confirmation | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._host: ToolGateHost | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.mcp = McpServers(
            self.registry, self._send, timeout_s=mcp_timeout_s, max_result_chars=max_result_chars
        )

    # ------------------------------------------------------------ set-up (Rule 1)

    def bind(self, host: ToolGateHost) -> None:
        self._host = host

    async def _load(self) -> None:
        tools = await self.catalog.list(self.thread.tenant, self.role_id)
        servers = await self.catalog.list_mcp(self.thread.tenant, self.role_id)
        for server in servers:
            resolved = await with_secret_headers(server, self.executor.secrets, self.thread.tenant)
            if resolved is not None:
                self.mcp.add(resolved, origin="role")
        specs: list[ToolSpec] = []
        for tool in tools:
            try:
                self.registry.add_http(tool)
            except (InvalidTool, UnknownTool) as e:  # e.g. its host left the allowlist
                log.warning("tool %s is not offered: %s", tool.name, e.code)
                continue
            specs.append(ToolSpec(tool.name, tool.description, dict(tool.parameters)))
        self._http_specs = tuple(specs)

    async def specs(self) -> tuple[ToolSpec, ...]:
        if self._loaded is None:
            self._loaded = asyncio.ensure_future(self._load())
            # A turn cancelled while the read is under way leaves nobody awaiting it.
            self._loaded.add_done_callback(retrieved)
        try:
            await asyncio.shield(self._loaded)
        except ToolsUnavailable:
            log.warning("the role's tools cannot be read now; offered without them")
            self._loaded = None
        await self.mcp.listed()  # a turn right after session.update is offered their tools
        return (*self._http_specs, *self.mcp.specs)

    def set_client_tools(self, specs: tuple[ToolSpec, ...]) -> None:
        """The client's functions (each ``session.update``). A declaration outside the schema
        subset is still gated, with its arguments unchecked here (the client checks them)."""
        tools: list[ClientTool] = []
        for spec in specs:
            tool = ClientTool(name=spec.name, description=spec.description[:1024],
                              parameters=spec.parameters)  # fmt: skip
            try:
                self.registry.set_client_tools([tool])
            except InvalidTool:
                tool = ClientTool(name=spec.name, description="", parameters={"type": "object"})
            tools.append(tool)
        try:
            self.registry.set_client_tools(tools)
        except InvalidTool as e:  # a name that clashes with a built-in or an HTTP tool
            log.warning("client tools not gated as declared: %s", e.code)
            self.registry.set_client_tools([])

    # ------------------------------------------------------------ MCP servers (Rule 7)

    def set_mcp_servers(self, servers: tuple[McpServer, ...]) -> None:
        """The session's MCP servers (each ``session.update``; ``runtime.mcp_servers``)."""
        self.mcp.set_session(servers)

    def mcp_server_of(self, name: str) -> str | None:
        """The label of the MCP server whose tool ``name`` is, if it is one."""
        return self.mcp.server_of(name)

    def mcp_error(self, call_id: str) -> ev.McpError | None:
        """Why an MCP call failed, as its ``mcp_call`` item says (None: it did not fail, or
        was not run)."""
        return self.mcp.error(call_id)

    # ------------------------------------------------------------ deciding (Rule 2)

    def gate(self, origin: CallOrigin) -> GateFn:
        async def decide_call(call: ToolCall) -> Verdict:
            return await self._decide_call(call, origin)

        return decide_call

    async def _decide_call(self, call: ToolCall, origin: CallOrigin) -> Verdict:
        await self.specs()
        try:
            tool = self.registry.get(call.name)
        except UnknownTool:
            # Every tool the engine runs is registered: an unknown name runs nowhere (not even
            # on the client, whose functions are registered as they are declared).
            return Verdict(refused=f"Error: there is no tool named {call.name[:64]!r}.")
        if tool.kind == "builtin":
            return PROCEED
        try:
            capability = self.registry.capability_of(call.name, call.arguments)
        except InvalidArguments as e:
            self._keep(call.call_id, {"decision": {"effect": "none", "invalid": str(e)}})
            return Verdict(refused=f"Error: invalid arguments for {call.name}: {e}")
        try:
            decision = await self.decider.decide(self.role_id, capability, self.thread)
        except ToolsUnavailable:
            self._keep(call.call_id, {"decision": {"effect": "none", "failure": "unavailable"}})
            return Verdict(refused=UNAVAILABLE)
        fields: dict[str, Any] = {"decision": decision.as_json()}
        log.info("tool %s: %s by %s", call.name, decision.effect, decision.decided_by)
        if decision.effect == "deny":
            self._keep(call.call_id, fields)
            return Verdict(refused=decision.refusal())
        if isinstance(tool, McpTool):
            # What the declaration's require_approval covers runs on the person's grant only;
            # what it waives runs unless denied (Rule 7).
            runs = decision.decided_by == "grant" or not tool.requires_approval
        else:
            runs = decision.effect == "allow"
        if runs:
            if decision.effect != "allow":
                fields["decision"] |= {"effect": "allow", "decided_by": "client"}
            self._keep(call.call_id, fields)
            return self._allowed(tool, call, origin.generation)
        if isinstance(tool, ClientTool) and self.client_undecided == "allow":
            # The client runs its own functions for the person in front of it.
            fields["decision"] |= {"effect": "allow", "decided_by": "client"}
            self._keep(call.call_id, fields)
            return self._allowed(tool, call, origin.generation)
        if self._pending is not None and self._pending.state is ConfirmState.PENDING:
            self._keep(call.call_id, fields | {"busy": True})
            return Verdict(refused=BUSY)
        confirmation = Confirmation(
            request_id=f"mcpr_{uuid.uuid4().hex[:24]}", call=call, tool=tool,
            capability=capability, generation=origin.generation, input=origin.input,
            input_seq=origin.input_seq,
            question=question_for(tool, capability, self.language),
        )  # fmt: skip
        self._keep(call.call_id, fields | {"confirmation": confirmation.request_id})
        self._ask(confirmation)
        return Verdict(ask=confirmation.question)

    def _allowed(self, tool: Tool, call: ToolCall, generation: int) -> Verdict:
        if isinstance(tool, ClientTool):
            self._to_client[call.call_id] = None
            while len(self._to_client) > MAX_CALLS_KEPT:
                self._to_client.popitem(last=False)
            return PROCEED
        if isinstance(tool, McpTool):
            mcp_tool = tool

            def run_mcp() -> Awaitable[str]:
                return self.mcp.run(mcp_tool, call)

            return Verdict(run=run_mcp)
        assert isinstance(tool, HttpTool)

        def run() -> Awaitable[str]:
            return self._run_http(tool, call, generation)

        return Verdict(run=run)

    def runs_on_client(self, call_id: str) -> bool:
        return call_id in self._to_client

    def journal_fields(self, call_id: str) -> dict[str, Any]:
        return dict(self._calls.get(call_id, {}))

    def _keep(self, call_id: str, fields: dict[str, Any]) -> None:
        self._calls[call_id] = fields
        self._calls.move_to_end(call_id)
        while len(self._calls) > MAX_CALLS_KEPT:
            self._calls.popitem(last=False)

    # ------------------------------------------------------------ running (Rule 4)

    async def _run_http(self, tool: HttpTool, call: ToolCall, generation: int) -> str:
        work = self.executor.call(self.thread.tenant, tool, call.arguments)
        if tool.cancellable:
            return (await work).body
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            return (await asyncio.shield(task)).body
        except asyncio.CancelledError:
            # Not cancellable: it finishes; its result is journaled, never spoken (Rule 4).
            task.add_done_callback(lambda t: self._spawn(self._journal_stale(call, generation, t)))
            raise

    async def _journal_stale(
        self, call: ToolCall, generation: int, task: asyncio.Task[Any]
    ) -> None:
        if task.cancelled():
            return
        error = task.exception()
        content = f"Error: {error}" if error is not None else task.result().body
        log.info("tool %s finished after its response was interrupted", call.name)
        await self._append(
            f"tool_result:{call.call_id}:stale:{generation}",
            {"call_id": call.call_id, "name": call.name, "content": content,
             "is_error": error is not None, "stale": True, "generation": generation},
        )  # fmt: skip

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("tool gate task failed: %s", type(task.exception()).__name__)

    async def _append(self, suffix: str, payload: dict[str, Any]) -> None:
        event = NewEvent(
            f"{self.voice_session_id}:{suffix}", EventKind.TOOL_RESULT, payload,
            self.voice_session_id,
        )  # fmt: skip
        await self.journal.append(self.thread, [event])

    # ------------------------------------------------------------ asking (Rules 2-3)

    def _ask(self, confirmation: Confirmation) -> None:
        self._pending = confirmation
        call = confirmation.call
        tool = confirmation.tool
        label = (
            tool.server_label if isinstance(tool, McpTool)
            else "client" if isinstance(tool, ClientTool) else "http"
        )  # fmt: skip
        item = ev.McpApprovalRequestItem(
            confirmation.request_id, call.name,
            json.dumps(call.arguments, ensure_ascii=False), label,
        )  # fmt: skip
        self._send([ev.ItemAdded(item), ev.ItemDone(item)])
        loop = asyncio.get_running_loop()
        self._cancel_timer()
        self._timer = loop.call_later(self.confirm_timeout_s, self._on_timeout, confirmation)

    def _send(self, events: list[ev.ServerEvent]) -> None:
        if self._host is not None:
            self._host.send_all(events)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timeout(self, confirmation: Confirmation) -> None:
        self._timer = None
        if confirmation.settle(ConfirmState.TIMED_OUT):
            self._spawn(self._timed_out(confirmation))

    async def _timed_out(self, confirmation: Confirmation) -> None:
        log.info("tool %s: the question timed out", confirmation.call.name)
        result = await self._settled(confirmation, None, by="timeout", content=NO_ANSWER)
        if self._host is not None and result is not None:
            self._host.continue_with(result, respond=True)

    def interrupted(self, generation: int, reason: str) -> None:
        """A cancel of the response that asked withdraws its question; a barge-in or typed
        text leaves it to the words that interrupted (Rule 3)."""
        pending = self._pending
        if (
            pending is not None
            and reason == "cancel"
            and pending.generation == generation
            and pending.settle(ConfirmState.WITHDRAWN)
        ):
            self._spawn(self._settled(pending, None, by="withdrawn", content=WITHDRAWN))

    async def answer(self, text: str, generation: int) -> Continuation | None:
        pending = self._pending
        if pending is None or pending.state is not ConfirmState.PENDING:
            return None
        said = classify_answer(text)
        if said is None:
            if pending.settle(ConfirmState.WITHDRAWN):
                await self._settled(pending, None, by="withdrawn", content=WITHDRAWN)
            return None
        if not pending.settle(ConfirmState.ANSWERED, said):
            return None
        return await self._answered(pending, said, by="voice", generation=generation)

    def approve(
        self,
        request_id: str,
        *,
        approve: bool,
        scope: str | None,
        rule: str | None,
        item_id: str | None,
    ) -> None:
        """An ``mcp_approval_response`` item (``ApprovalNotFound`` when nothing waits for it);
        the call runs and the turn continues in the background."""
        pending = self._pending
        if pending is None or pending.request_id != request_id:
            raise ApprovalNotFound(f"no approval request {request_id[:64]!r} is waiting")
        said: Answer = ("lifetime" if scope == "lifetime" else "once") if approve else "deny"
        if not pending.settle(ConfirmState.ANSWERED, said):
            raise ApprovalNotFound(f"approval request {request_id[:64]!r} was settled already")
        self._cancel_timer()
        self._spawn(self._approved(pending, said, rule, item_id))

    async def _approved(
        self, pending: Confirmation, said: Answer, rule: str | None, item_id: str | None
    ) -> None:
        if rule is not None and rule.strip():
            try:
                await self.rules.create(
                    self.thread.tenant, self.role_id, rule, Author("person", self.person)
                )
                pending.extra["rule_saved"] = True
            except ToolError as e:
                log.warning("the answer's rule was not saved: %s", e.code)
        result = await self._answered(
            pending, said, by="approval", generation=pending.generation, item_id=item_id
        )
        if self._host is not None and result is not None:
            self._host.continue_with(result, respond=True)

    async def _answered(
        self,
        confirmation: Confirmation,
        said: Answer,
        *,
        by: str,
        generation: int,
        item_id: str | None = None,
    ) -> Continuation | None:
        self._cancel_timer()
        capability = confirmation.capability
        new = grant_for(said, capability, self.person, self.thread.thread_id)
        try:
            grant = await self.grants.create(self.thread.tenant, self.role_id, new)
        except ToolError as e:
            log.warning("the answer's grant was not stored: %s", e.code)
            return await self._settled(confirmation, said, by=by, content=UNAVAILABLE,
                                       item_id=item_id)  # fmt: skip
        confirmation.extra["grant_id"] = grant.id
        log.info("tool %s: the person answered %s", confirmation.call.name, said)
        if said == "deny":
            return await self._settled(confirmation, said, by=by, content=DECLINED,
                                       item_id=item_id)  # fmt: skip
        try:
            decision = await self.decider.decide(self.role_id, capability, self.thread)
        except ToolsUnavailable:
            return await self._settled(confirmation, said, by=by, content=UNAVAILABLE,
                                       item_id=item_id)  # fmt: skip
        confirmation.extra["decision"] = decision.as_json()
        if decision.effect != "allow":
            content = decision.refusal() if decision.effect == "deny" else UNAVAILABLE
            return await self._settled(confirmation, said, by=by, content=content,
                                       item_id=item_id)  # fmt: skip
        tool, call = confirmation.tool, confirmation.call
        if isinstance(tool, ClientTool):
            self._allowed(tool, call, generation)
            confirmed = await self._finish(confirmation, said, by=by, content=None,
                                           item_id=item_id, approved=True)  # fmt: skip
            fields = self.journal_fields(call.call_id)
            self._keep(call.call_id, fields | {"confirmation": confirmed})
            return Continuation(call, None, confirmation.input, confirmation.input_seq)
        try:
            if isinstance(tool, McpTool):
                content = await self.mcp.run(tool, call)
            else:
                assert isinstance(tool, HttpTool)
                content = await self._run_http(tool, call, generation)
            error = False
        except ToolError as e:
            log.info("tool %s failed: %s", call.name, e.code)
            content, error = f"Error: the tool {call.name!r} failed.", True
        return await self._settled(confirmation, said, by=by, content=content,
                                   item_id=item_id, approved=True, is_error=error)  # fmt: skip

    async def _finish(
        self,
        confirmation: Confirmation,
        said: Answer | None,
        *,
        by: str,
        content: str | None,
        item_id: str | None = None,
        approved: bool = False,
    ) -> dict[str, Any]:
        """The question is over: tell the client it is settled; what the journal keeps of it."""
        self._cancel_timer()
        if self._pending is confirmation:
            self._pending = None
        answer_item = ev.McpApprovalResponseItem(
            item_id or f"mcpa_{uuid.uuid4().hex[:24]}", confirmation.request_id, approved,
            reason=None if said is not None else by,
        )  # fmt: skip
        self._send([ev.ItemAdded(answer_item), ev.ItemDone(answer_item)])
        return {"request_id": confirmation.request_id, "answer": said, "by": by,
                **confirmation.extra}  # fmt: skip

    async def _settled(
        self,
        confirmation: Confirmation,
        said: Answer | None,
        *,
        by: str,
        content: str,
        item_id: str | None = None,
        approved: bool = False,
        is_error: bool | None = None,
    ) -> Continuation:
        """``_finish``, then journal the call's result (Rule 5): what the turn continues with."""
        confirmed = await self._finish(
            confirmation, said, by=by, content=content, item_id=item_id, approved=approved
        )
        call = confirmation.call
        error = (not approved) if is_error is None else is_error
        try:
            await self._append(
                f"tool_result:{call.call_id}:{confirmation.request_id}",
                {"call_id": call.call_id, "name": call.name, "content": content,
                 "is_error": error, "confirmation": confirmed},
            )  # fmt: skip
        except Exception as e:  # the journal buffer rides out outages; never fail the turn
            log.warning("a tool result was not journaled: %s", type(e).__name__)
        result = ToolResult(call.call_id, call.name, content, is_error=error)
        return Continuation(call, result, confirmation.input, confirmation.input_seq, ran=approved)

    async def close(self) -> None:
        self._cancel_timer()
        await self.mcp.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task


__all__ = ["ApprovalNotFound", "ToolGate"]
