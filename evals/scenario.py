"""Scenario files of ``openrealtime eval`` (SPEC EVAL-1): what to load, who to be, what to say,
what to expect.

Theory of operation
-------------------
A file (YAML or JSON; ``.json`` is read as JSON, anything else as YAML) holds one scenario, or
``scenarios:`` — a list of them — beside what they share:

```yaml
documents:                      # loaded once per file, bound to every scenario's role
  - path: shop_policy.md        # relative to this file; its first "# " heading names it
  - name: Opening hours
    text: "We open 9:00-18:00 on weekdays."
scenarios:
  - id: refunds                 # unique in the run; defaults to the file's name (+ index)
    split: dev                  # free label, counted separately in the summary
    about: what it tests        # shown in the report
    role:                       # a new role per scenario (or role_id: an existing one)
      instructions: You are the shop's after-sales assistant.
      language: en              # en or zh
      memory: true
    memory: ["The person prefers short answers."]   # entries added before the first session
    tools:                      # client function tools offered in every session (GA shape)
      - name: get_order
        description: Look up an order.
        parameters: {type: object, properties: {order: {type: string}}, required: [order]}
    sessions:                   # each a new session on a new thread: memory carries over
      - turns:
          - user: How long do refunds take?         # typed
            expect: {contains_any: ["7 days"], within_ms: 8000}
            tags: [answerable, paraphrase]         # what it tests (TAGS): a pass rate per tag
          - say: Where is my order 1234?           # spoken: TTS → the server's VAD and ASR
            tool_output: {status: shipped}         # what a called tool returns
            expect: {tool: {name: get_order, arguments: {order: "1234"}}}
```

Rule 1. Every field is checked when the file is read: an unknown key, a wrong type or a turn
        without ``user``/``say`` is a ``ScenarioError`` naming the file and the place
        (``scenarios[2].sessions[0].turns[3].expect``), before anything runs.
Rule 2. Checks (``expect``): ``contains_any`` / ``contains_all`` / ``contains_none`` (case and
        white space ignored), ``dont_know`` (true: says it does not know; false: answers),
        ``tool`` (a call of that name whose arguments include the given ones), ``no_tool``,
        ``within_ms`` (first answer audio or text after the turn), ``max_chars``, ``judge`` (a
        written criterion for a model judge). See ``evals.checks``.
Rule 3. Nothing here touches the network: a scenario is plain data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CHECK_KEYS = frozenset(
    {
        "contains_any",
        "contains_all",
        "contains_none",
        "dont_know",
        "tool",
        "no_tool",
        "within_ms",
        "max_chars",
        "judge",
    }
)
LANGUAGES = frozenset({"en", "zh"})
TAGS = frozenset(
    {
        "answerable",  # the documents or the conversation answer it
        "unanswerable",  # nothing the agent has answers it: it should say so
        "memory",  # about the person, from an earlier session or memory entry
        "followup",  # needs an earlier turn of the session to be understood
        "cross_language",  # asked in one language about a document in the other
        "combination",  # a sum, difference or comparison over stated facts
        "correction",  # corrects something said before
        "statement",  # tells the agent something; an acknowledgement is expected
        "small_talk",  # greetings, thanks, goodbyes
        "paraphrase",  # the words differ from the document's
        "tool",  # a function tool should (or should not) be called
    }
)
MAX_TURNS_PER_SESSION = 200


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message names the file and the place."""


@dataclass(frozen=True, slots=True)
class Document:
    name: str
    text: str


@dataclass(frozen=True, slots=True)
class ToolExpectation:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Expect:
    contains_any: tuple[str, ...] = ()
    contains_all: tuple[str, ...] = ()
    contains_none: tuple[str, ...] = ()
    dont_know: bool | None = None
    tool: ToolExpectation | None = None
    no_tool: bool = False
    within_ms: float | None = None
    max_chars: int | None = None
    judge: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    text: str
    spoken: bool = False
    expect: Expect = field(default_factory=Expect)
    tool_output: str = '{"ok": true}'
    """What every function call of the turn returns (JSON text)."""
    tags: tuple[str, ...] = ()
    """What the turn tests (``TAGS``); the summary reports a pass rate per tag."""


@dataclass(frozen=True, slots=True)
class Session:
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Role:
    instructions: str = ""
    language: str = "en"
    memory: bool = True
    name: str = ""
    role_id: str | None = None
    """An existing role to use as it is (nothing is created or bound)."""


@dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    source: Path
    documents: tuple[Document, ...]
    role: Role
    sessions: tuple[Session, ...]
    memory: tuple[str, ...] = ()
    tools: tuple[Mapping[str, Any], ...] = ()
    split: str = ""
    about: str = ""

    @property
    def turns(self) -> int:
        return sum(len(s.turns) for s in self.sessions)


class _Reader:
    """Reads one file's data with the place of every value at hand (Rule 1)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> ScenarioError:
        return ScenarioError(
            f"{self.path}: {where}: {message}" if where else f"{self.path}: {message}"
        )

    def mapping(self, value: Any, where: str, allowed: frozenset[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(where, f"expected a mapping, got {type(value).__name__}")
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            raise self.fail(where, f"unknown key(s) {', '.join(unknown)}")
        return value

    def list(self, value: Any, where: str) -> Sequence[Any]:
        if not isinstance(value, list | tuple):
            raise self.fail(where, f"expected a list, got {type(value).__name__}")
        return value

    def text(self, value: Any, where: str, *, empty: bool = False) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.fail(where, f"expected text, got {type(value).__name__}")
        text = str(value)
        if not empty and not text.strip():
            raise self.fail(where, "must not be empty")
        return text

    def texts(self, value: Any, where: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        return tuple(self.text(v, f"{where}[{i}]") for i, v in enumerate(self.list(value, where)))

    def flag(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {value!r}")
        return value

    def number(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise self.fail(where, f"expected a positive number, got {value!r}")
        return float(value)

    # ------------------------------------------------------------ parts

    def documents(self, value: Any, where: str) -> tuple[Document, ...]:
        out = []
        for i, item in enumerate(self.list(value, where)):
            at = f"{where}[{i}]"
            doc = self.mapping(item, at, frozenset({"path", "name", "text"}))
            if ("path" in doc) == ("text" in doc):
                raise self.fail(at, "give either path or text")
            if "path" in doc:
                path = self.path.parent / self.text(doc["path"], f"{at}.path")
                try:
                    text = path.read_text(encoding="utf-8")
                except OSError as e:
                    raise self.fail(f"{at}.path", f"cannot read {path}: {e.strerror}") from None
                first = text.splitlines()[0] if text else ""
                default = first.lstrip("#").strip() if first.startswith("# ") else path.stem
            else:
                text = self.text(doc["text"], f"{at}.text")
                default = f"document {i + 1}"
            name = self.text(doc.get("name", default), f"{at}.name")
            out.append(Document(name=name[:200], text=text))
        return tuple(out)

    def expect(self, value: Any, where: str) -> Expect:
        e = self.mapping(value, where, CHECK_KEYS)
        tool = None
        if "tool" in e:
            raw = e["tool"]
            if isinstance(raw, str):
                raw = {"name": raw}
            t = self.mapping(raw, f"{where}.tool", frozenset({"name", "arguments"}))
            if "name" not in t:
                raise self.fail(f"{where}.tool", "name is required")
            arguments = t.get("arguments", {})
            self.mapping(arguments, f"{where}.tool.arguments", frozenset(arguments or ()))
            tool = ToolExpectation(self.text(t["name"], f"{where}.tool.name"), dict(arguments))
        no_tool = self.flag(e["no_tool"], f"{where}.no_tool") if "no_tool" in e else False
        if tool is not None and no_tool:
            raise self.fail(where, "tool and no_tool contradict each other")
        return Expect(
            contains_any=self.texts(e.get("contains_any", ()), f"{where}.contains_any"),
            contains_all=self.texts(e.get("contains_all", ()), f"{where}.contains_all"),
            contains_none=self.texts(e.get("contains_none", ()), f"{where}.contains_none"),
            dont_know=self.flag(e["dont_know"], f"{where}.dont_know") if "dont_know" in e else None,
            tool=tool,
            no_tool=no_tool,
            within_ms=self.number(e["within_ms"], f"{where}.within_ms")
            if "within_ms" in e
            else None,
            max_chars=int(self.number(e["max_chars"], f"{where}.max_chars"))
            if "max_chars" in e
            else None,
            judge=self.text(e["judge"], f"{where}.judge") if "judge" in e else None,
        )

    def turn(self, value: Any, where: str) -> Turn:
        t = self.mapping(value, where, frozenset({"user", "say", "expect", "tool_output", "tags"}))
        if ("user" in t) == ("say" in t):
            raise self.fail(where, "give either user (typed) or say (spoken)")
        spoken = "say" in t
        text = self.text(t["say" if spoken else "user"], f"{where}.{'say' if spoken else 'user'}")
        output = t.get("tool_output", {"ok": True})
        tool_output = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        tags = self.texts(t.get("tags", ()), f"{where}.tags")
        unknown = sorted(set(tags) - TAGS)
        if unknown:
            raise self.fail(f"{where}.tags", f"unknown tag(s) {', '.join(unknown)}")
        return Turn(
            text=text,
            spoken=spoken,
            expect=self.expect(t.get("expect", {}), f"{where}.expect"),
            tool_output=tool_output,
            tags=tags,
        )

    def sessions(self, value: Any, where: str) -> tuple[Session, ...]:
        out = []
        items = self.list(value, where)
        if not items:
            raise self.fail(where, "at least one session is needed")
        for i, item in enumerate(items):
            at = f"{where}[{i}]"
            s = self.mapping(item, at, frozenset({"turns"}))
            turns = self.list(s.get("turns"), f"{at}.turns")
            if not turns:
                raise self.fail(f"{at}.turns", "at least one turn is needed")
            if len(turns) > MAX_TURNS_PER_SESSION:
                raise self.fail(f"{at}.turns", f"at most {MAX_TURNS_PER_SESSION} turns")
            out.append(
                Session(tuple(self.turn(t, f"{at}.turns[{j}]") for j, t in enumerate(turns)))
            )
        return tuple(out)

    def role(self, value: Any, where: str) -> Role:
        r = self.mapping(
            value, where, frozenset({"instructions", "language", "memory", "name", "role_id"})
        )
        language = self.text(r.get("language", "en"), f"{where}.language")
        if language not in LANGUAGES:
            raise self.fail(f"{where}.language", f"one of {', '.join(sorted(LANGUAGES))}")
        return Role(
            instructions=self.text(r.get("instructions", ""), f"{where}.instructions", empty=True),
            language=language,
            memory=self.flag(r["memory"], f"{where}.memory") if "memory" in r else True,
            name=self.text(r.get("name", ""), f"{where}.name", empty=True),
            role_id=self.text(r["role_id"], f"{where}.role_id") if "role_id" in r else None,
        )

    def tools(self, value: Any, where: str) -> tuple[Mapping[str, Any], ...]:
        out = []
        for i, item in enumerate(self.list(value, where)):
            at = f"{where}[{i}]"
            t = self.mapping(item, at, frozenset({"type", "name", "description", "parameters"}))
            if t.get("type", "function") != "function":
                raise self.fail(f"{at}.type", "only function tools are offered by scenarios")
            self.text(t.get("name"), f"{at}.name")
            out.append({"type": "function", **{k: v for k, v in t.items() if k != "type"}})
        return tuple(out)


SCENARIO_KEYS = frozenset(
    {"id", "about", "split", "role", "memory", "tools", "sessions", "documents"}
)


def load_file(path: Path) -> list[Scenario]:
    """Every scenario of one file (Rule 1)."""
    reader = _Reader(path)
    try:
        raw_text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise reader.fail("", f"cannot read it: {e.strerror}") from None
    try:
        data = json.loads(raw_text) if path.suffix == ".json" else yaml.safe_load(raw_text)
    except (ValueError, yaml.YAMLError) as e:
        raise reader.fail(
            "", f"not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}"
        ) from None
    top = reader.mapping(data, "", SCENARIO_KEYS | {"scenarios"})
    shared = reader.documents(top.get("documents", ()), "documents")
    if "scenarios" in top:
        extra = sorted(k for k in top if k not in ("scenarios", "documents"))
        if extra:
            raise reader.fail(
                "", f"with scenarios:, only documents: may stand beside it ({', '.join(extra)})"
            )
        items = [
            (f"scenarios[{i}]", s) for i, s in enumerate(reader.list(top["scenarios"], "scenarios"))
        ]
    else:
        items = [("", {k: v for k, v in top.items() if k != "documents"})]
    out: list[Scenario] = []
    for where, item in items:
        at = where or "scenario"
        s = reader.mapping(item, at, SCENARIO_KEYS)
        index = len(out)
        default_id = path.stem if len(items) == 1 else f"{path.stem}-{index + 1}"
        out.append(
            Scenario(
                id=reader.text(s.get("id", default_id), f"{at}.id"),
                source=path,
                documents=shared + reader.documents(s.get("documents", ()), f"{at}.documents"),
                role=reader.role(s.get("role", {}), f"{at}.role"),
                sessions=reader.sessions(s.get("sessions"), f"{at}.sessions"),
                memory=reader.texts(s.get("memory", ()), f"{at}.memory"),
                tools=reader.tools(s.get("tools", ()), f"{at}.tools"),
                split=reader.text(s.get("split", ""), f"{at}.split", empty=True),
                about=reader.text(s.get("about", ""), f"{at}.about", empty=True),
            )
        )
    return out


def load(paths: Sequence[Path]) -> list[Scenario]:
    """Every scenario of every file (a directory: its ``*.yaml``, ``*.yml`` and ``*.json``);
    ids must be unique across the run."""
    scenarios: list[Scenario] = []
    for path in paths:
        files = (
            sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
            if path.is_dir()
            else [path]
        )
        for file in files:
            scenarios += load_file(file)
    seen: dict[str, Path] = {}
    for scenario in scenarios:
        if scenario.id in seen:
            raise ScenarioError(
                f"{scenario.source}: scenario id {scenario.id!r} is used in {seen[scenario.id]} too"
            )
        seen[scenario.id] = scenario.source
    if not scenarios:
        raise ScenarioError("no scenario files found")
    return scenarios
