"""Summary compaction (SPEC J-4): thresholds, checksums, idempotency, races, summarizers."""

from __future__ import annotations

import asyncio

import pytest

from journal.amendments import item_deleted, item_truncated
from journal.checkpoints import InMemoryCheckpointStore, source_checksum
from journal.compaction import CompactionOutcome, CompactionPolicy, ThreadCompactor
from journal.events import JournalEvent, NewEvent, ThreadRef
from journal.projection import render_context
from journal.store import InMemoryJournalStore
from journal.summarizers import (
    ExtractiveSummarizer,
    ModelSummarizer,
    Summarizer,
    Summary,
    SummaryRequest,
    summary_prompt,
)
from journal.tokens import count_tokens
from tests.journal.builders import (
    THREAD,
    answered,
    append_all,
    conversation,
    numbered,
    said,
    tool_call,
    tool_result,
)
from tests.journal.conftest import Backend, CountingStore

POLICY = CompactionPolicy(threshold_tokens=400, keep_recent_tokens=150, max_summary_tokens=120)


def compactor(
    backend: Backend, policy: CompactionPolicy = POLICY, summarizer: Summarizer | None = None
) -> ThreadCompactor:
    return ThreadCompactor(
        backend.journal, backend.checkpoints, policy=policy, summarizer=summarizer
    )


async def test_history_below_the_threshold_is_left_alone(backend: Backend) -> None:
    await append_all(backend.journal, THREAD, conversation(5))
    result = await compactor(backend).compact(THREAD)
    assert result.outcome is CompactionOutcome.BELOW_THRESHOLD
    assert result.checkpoint is None and result.rounds == 0
    assert await backend.checkpoints.latest(THREAD) is None


async def test_past_the_threshold_older_events_are_summarised(backend: Backend) -> None:
    events = conversation(40)
    await append_all(backend.journal, THREAD, events)
    result = await compactor(backend).compact(THREAD, language="en")
    assert result.outcome is CompactionOutcome.COMPACTED
    checkpoint = result.checkpoint
    assert checkpoint is not None and checkpoint.from_seq == 1
    stored = await backend.journal.read(THREAD)
    # The checksum is over the canonical JSON of exactly the events it covers.
    segment = stored[: checkpoint.to_seq]
    assert checkpoint.checksum == source_checksum(segment, None)
    assert checkpoint.verifies(segment) and checkpoint.intact()
    # The newest keep_recent_tokens stay raw, starting at a user input (a turn boundary).
    raw = stored[checkpoint.to_seq :]
    raw_tokens = count_tokens(render_context(raw, "en").text)
    assert POLICY.keep_recent_tokens - 30 <= raw_tokens <= POLICY.threshold_tokens
    assert raw[0].kind.value == "user_input"
    # The summary is bounded and made of the conversation's own sentences.
    assert count_tokens(checkpoint.summary) <= POLICY.max_summary_tokens
    assert checkpoint.summary.startswith(("User: ", "Assistant: "))
    assert checkpoint.summarizer == "extractive-v1"
    assert result.events_summarized == checkpoint.to_seq


async def test_compaction_is_idempotent(backend: Backend) -> None:
    await append_all(backend.journal, THREAD, conversation(40))
    first = await compactor(backend).compact(THREAD)
    again = await compactor(backend).compact(THREAD)
    assert again.outcome is CompactionOutcome.BELOW_THRESHOLD
    assert again.checkpoint == first.checkpoint
    assert len(await backend.checkpoints.list(THREAD)) == first.rounds


async def test_new_history_extends_the_chain(backend: Backend) -> None:
    await append_all(backend.journal, THREAD, conversation(40))
    first = await compactor(backend).compact(THREAD)
    await append_all(backend.journal, THREAD, conversation(40, prefix="later-"))
    second = await compactor(backend).compact(THREAD)
    assert second.outcome is CompactionOutcome.COMPACTED
    chain = await backend.checkpoints.list(THREAD)
    assert first.checkpoint is not None and second.checkpoint is not None
    assert chain[0] == first.checkpoint and chain[-1] == second.checkpoint
    for earlier, later in zip(chain, chain[1:], strict=False):
        assert later.from_seq == earlier.to_seq + 1
        assert later.previous_checksum == earlier.checksum
    # The rolling summary still carries older key sentences next to new ones, bounded.
    assert count_tokens(second.checkpoint.summary) <= POLICY.max_summary_tokens


class Interleaving(CountingStore):
    """Yields to the loop on every read, so concurrent runs really interleave in memory too."""

    async def read(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int | None = None
    ) -> list[JournalEvent]:
        await asyncio.sleep(0)
        return await super().read(thread, after_seq=after_seq, limit=limit)


async def test_concurrent_compactions_of_one_thread_agree(backend: Backend) -> None:
    await append_all(backend.journal, THREAD, conversation(120))
    policy = CompactionPolicy(
        threshold_tokens=400, keep_recent_tokens=150, max_segment_events=40, max_rounds=20
    )
    journal = Interleaving(backend.journal)
    runs = [ThreadCompactor(journal, backend.checkpoints, policy=policy) for _ in range(6)]
    results = await asyncio.gather(*(run.compact(THREAD) for run in runs))
    outcomes = [r.outcome for r in results]
    # A run that reads the thread only after another has compacted it finds too little left
    # (seen on PostgreSQL under load): below the threshold, which is as right as a race.
    assert set(outcomes) <= {
        CompactionOutcome.COMPACTED,
        CompactionOutcome.RACED,
        CompactionOutcome.BELOW_THRESHOLD,
    }
    assert CompactionOutcome.COMPACTED in outcomes
    chain = await backend.checkpoints.list(THREAD, limit=1000)
    assert chain[0].from_seq == 1
    for earlier, later in zip(chain, chain[1:], strict=False):
        assert later.from_seq == earlier.to_seq + 1
    stored = await backend.journal.read(THREAD)
    for checkpoint in chain:
        assert checkpoint.verifies(stored[checkpoint.from_seq - 1 : checkpoint.to_seq])
    # Whoever lost a race can run again and finds the work done (or finishes it).
    final = await ThreadCompactor(backend.journal, backend.checkpoints, policy=policy).compact(
        THREAD
    )
    assert final.outcome in (CompactionOutcome.BELOW_THRESHOLD, CompactionOutcome.COMPACTED)
    again = await ThreadCompactor(backend.journal, backend.checkpoints, policy=policy).compact(
        THREAD
    )
    assert again.outcome is CompactionOutcome.BELOW_THRESHOLD


async def test_a_tool_call_is_never_separated_from_its_result() -> None:
    backend = Backend("memory", InMemoryJournalStore(), InMemoryCheckpointStore())
    events: list[NewEvent] = []
    for i in range(30):
        events += [
            said(f"u{i}", f"Look up order {i}, please."),
            tool_call(f"c{i}", f"call{i}", order=i),
            tool_result(f"r{i}", f"call{i}", "shipped " * 10),
            answered(f"a{i}", f"Order {i} has shipped."),
        ]
    await append_all(backend.journal, THREAD, events)
    for segment_size in range(2, 12):
        policy = CompactionPolicy(
            threshold_tokens=400, keep_recent_tokens=150, max_segment_events=segment_size
        )
        checkpoints = InMemoryCheckpointStore()
        result = await ThreadCompactor(backend.journal, checkpoints, policy=policy).compact(THREAD)
        assert result.checkpoint is not None
        for checkpoint in await checkpoints.list(THREAD, limit=1000):
            after = events[checkpoint.to_seq] if checkpoint.to_seq < len(events) else None
            assert after is None or after.kind.value not in ("tool_result",)


class RecordingSummarizer:
    def __init__(self) -> None:
        self.inner = ExtractiveSummarizer()
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> Summary:
        self.requests.append(request)
        return await self.inner.summarize(request)


async def test_a_summary_never_includes_a_deleted_item(backend: Backend) -> None:
    events = [
        said("u-secret", "Remember my PIN is 9731.", item_id="item_secret"),
        answered("a-long", "The refund takes 3 days. Unheard part 99.", item_id="item_long"),
        *conversation(40),
        # Both amendments come long after their items: in the part compaction keeps raw.
        item_deleted("d1", "item_secret"),
        item_truncated("t1", "item_long", "The refund takes 3 days."),
    ]
    await append_all(backend.journal, THREAD, events)
    summarizer = RecordingSummarizer()
    result = await compactor(backend, summarizer=summarizer).compact(THREAD, language="en")
    checkpoint = result.checkpoint
    assert checkpoint is not None and checkpoint.from_seq == 1
    assert "9731" not in checkpoint.summary and "Unheard" not in checkpoint.summary
    given = summarizer.requests[0].events
    assert "u-secret" not in [e.event_id for e in given]
    assert given[0].payload["interrupted"] is True
    # The checksum is over the stored events, amendments or not.
    stored = await backend.journal.read(THREAD)
    assert checkpoint.verifies(stored[: checkpoint.to_seq])


async def test_deleted_items_do_not_count_toward_the_threshold(backend: Backend) -> None:
    long = [said(f"long{i}", "blah " * 60, item_id=f"item{i}") for i in range(10)]
    deletions = [item_deleted(f"d{i}", f"item{i}") for i in range(10)]
    await append_all(backend.journal, THREAD, [*long, *conversation(3), *deletions])
    result = await compactor(backend).compact(THREAD)
    assert result.outcome is CompactionOutcome.BELOW_THRESHOLD


async def test_a_broken_chain_is_not_extended(backend: Backend) -> None:
    await append_all(backend.journal, THREAD, conversation(40))
    first = await compactor(backend).compact(THREAD)
    assert first.checkpoint is not None
    await backend.tamper_event(THREAD, 1, {"text": "rewritten history", "source": "voice"})
    await append_all(backend.journal, THREAD, conversation(40, prefix="later-"))
    result = await compactor(backend).compact(THREAD)
    assert result.outcome is CompactionOutcome.CHAIN_BROKEN
    assert await backend.checkpoints.list(THREAD) == [first.checkpoint]


# ----------------------------------------------------------------------------- summarizers


def request(
    events: list[NewEvent],
    *,
    max_tokens: int = 200,
    previous: str | None = None,
    language: str | None = None,
) -> SummaryRequest:
    return SummaryRequest(
        previous=previous, events=numbered(events), language=language, max_tokens=max_tokens
    )


def test_extractive_summary_keeps_key_sentences_in_chinese() -> None:
    events = [
        said("u1", "你好。"),
        answered("a1", "你好!有什么可以帮你?"),
        said("u2", "我的目标是学会日语。我喜欢简洁回答。"),
        answered("a2", "好的。"),
        said("u3", "嗯。"),
        said("u4", "订单号是 48213,我想退货。"),
        answered("a4", "资料规定签收后 7 天内可以退货。"),
    ]
    text = ExtractiveSummarizer().summarize_now(request(events, max_tokens=60))
    items = text.split("\n")
    assert "用户:我的目标是学会日语。" in items
    assert "用户:订单号是 48213,我想退货。" in items
    assert "用户:嗯。" not in items and "助手:好的。" not in items
    assert count_tokens(text) <= 60
    # Written oldest first.
    assert items.index("用户:我的目标是学会日语。") < items.index("用户:订单号是 48213,我想退货。")


def test_extractive_summary_in_english_is_bounded_and_deterministic() -> None:
    events = conversation(30) + [
        said("x1", "Please remember that I prefer short answers."),
        said("x2", "ok"),
        said("x3", "My goal is to learn Japanese by June 2027."),
    ]
    summarizer = ExtractiveSummarizer()
    text = summarizer.summarize_now(request(events, max_tokens=50, language="en"))
    assert text == summarizer.summarize_now(request(events, max_tokens=50, language="en"))
    assert count_tokens(text) <= 50
    assert "User: Please remember that I prefer short answers." in text
    assert "User: My goal is to learn Japanese by June 2027." in text
    assert "User: ok" not in text


def test_extractive_summary_folds_in_the_previous_one() -> None:
    previous = "User: My name is Ada.\nAssistant: Nice to meet you."
    text = ExtractiveSummarizer().summarize_now(
        request([said("u1", "I need a refund for order 77.")], previous=previous, language="en")
    )
    assert text.split("\n")[0] == "User: My name is Ada."
    assert "User: I need a refund for order 77." in text


def test_interrupted_output_is_summarised_by_what_was_heard() -> None:
    events = [
        answered(
            "a1",
            "The refund takes 3 days. Secret unheard part 99.",
            heard="The refund takes 3 days.",
        )
    ]
    text = ExtractiveSummarizer().summarize_now(request(events, language="en"))
    assert "3 days" in text and "Secret" not in text


async def test_a_model_summarizer_is_an_async_callable() -> None:
    prompts: list[str] = []

    async def model(prompt: str) -> str:
        prompts.append(prompt)
        return (
            "User: wants a refund for order 77.\nAssistant: explained the 7-day rule. "
            + "More detail. " * 200
        )

    summarizer = ModelSummarizer(model, name="gpt-test")
    summary = await summarizer.summarize(
        request([said("u1", "Refund order 77?")], max_tokens=40, language="en")
    )
    assert summary.summarizer == "gpt-test"
    assert summary.text.startswith("User: wants a refund for order 77.")
    assert count_tokens(summary.text) <= 40
    assert "User: Refund order 77?" in prompts[0]


@pytest.mark.parametrize("failure", ["raises", "times out"])
async def test_a_failing_model_falls_back_to_the_extractive_summary(failure: str) -> None:
    async def model(prompt: str) -> str:
        if failure == "raises":
            raise RuntimeError("model unavailable")
        await asyncio.sleep(10)
        return "never"

    summarizer = ModelSummarizer(model, timeout=0.05)
    summary = await summarizer.summarize(
        request([said("u1", "I need a refund for order 77.")], language="en")
    )
    assert summary.summarizer == "extractive-v1"
    assert summary.text == "User: I need a refund for order 77."


async def test_compaction_with_a_model_summarizer_records_it(backend: Backend) -> None:
    async def model(prompt: str) -> str:
        return "User: asked about returns forty times."

    await append_all(backend.journal, THREAD, conversation(40))
    result = await compactor(backend, summarizer=ModelSummarizer(model, name="m1")).compact(THREAD)
    assert result.checkpoint is not None
    assert result.checkpoint.summarizer == "m1"
    assert result.checkpoint.summary == "User: asked about returns forty times."


def test_summary_prompt_is_in_the_threads_language() -> None:
    zh = summary_prompt(request([said("u1", "我想退货。")], previous="用户:我叫小王。"))
    assert (
        zh.startswith("请把下面的对话压缩") and "用户:我叫小王。" in zh and "用户:我想退货。" in zh
    )
    en = summary_prompt(request([said("u1", "I want a refund.")]))
    assert en.startswith("Condense the conversation")


def test_policy_is_validated() -> None:
    with pytest.raises(ValueError):
        CompactionPolicy(threshold_tokens=100, keep_recent_tokens=100)
    with pytest.raises(ValueError):
        CompactionPolicy(max_segment_events=0)


def test_a_policy_for_a_budget_keeps_summary_and_raw_history_inside_it() -> None:
    policy = CompactionPolicy.for_budget(4000)
    assert policy.max_summary_tokens + policy.threshold_tokens <= 4000
    assert policy.keep_recent_tokens == policy.threshold_tokens // 2
    assert CompactionPolicy.for_budget(10).threshold_tokens >= 2
