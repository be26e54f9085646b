"""Summary checkpoints (SPEC J-4): what stands in for a thread's older events, and where it is kept.

Theory of operation
-------------------
A thread's checkpoints form a chain. Checkpoint *n* holds a rolling summary of the thread's
events ``1 … to_seq``: the summary of checkpoint *n − 1* folded together with the events
``from_seq … to_seq`` that came after it (its *segment*). Its ``checksum`` is SHA-256 over the
canonical JSON of its sources — the segment's events (seq, id, kind, payload, session) and the
previous checkpoint's checksum — so a checkpoint can be verified by reading only its own
segment, whose length compaction bounds (``CompactionPolicy.max_segment_events``). ``digest``
covers every field of the checkpoint itself, so a summary text changed at rest is noticed too.
The checksum covers the events as stored, and an item deleted or truncated later
(``journal/amendments.py``) changes no stored event: such a checkpoint still verifies and its
summary stays as written (compaction folds in only the amendments journaled before it ran).

Rules every ``CheckpointStore`` keeps (``tests/journal/checkpoint_contract.py`` checks them
against each store):

1. Scope: every call names a ``ThreadRef``; another tenant's, user's or thread's checkpoints are
   never returned or changed.
2. Chain: a thread's first checkpoint starts at seq 1; each next one starts right after the
   latest ends (``from_seq == latest.to_seq + 1``) and names the latest's checksum as
   ``previous_checksum``; ``to_seq >= from_seq``. Anything else raises ``CheckpointConflict``.
3. Idempotency: putting a checkpoint equal to the one already stored at its ``from_seq``
   returns the stored one and writes nothing; a different one raises ``CheckpointConflict``.
   So two compactions racing on one thread never fork the chain: one wins, the other learns.
4. Bounded: a summary holds at most ``MAX_SUMMARY_CHARS`` characters; ``list`` returns at most
   ``limit`` checkpoints.
5. Durable stores keep checkpoints across restarts; erasing a thread's journal erases them
   (PostgreSQL: a foreign key with ``ON DELETE CASCADE``; otherwise call ``delete_thread``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from journal.errors import CheckpointConflict
from journal.events import JournalEvent, ThreadRef, canonical_digest

MAX_SUMMARY_CHARS = 16_000
MAX_LIST = 1000


def source_checksum(events: Sequence[JournalEvent], previous_checksum: str | None) -> str:
    """SHA-256 over the canonical JSON of a segment's events and the previous checksum."""
    return canonical_digest(
        {
            "previous": previous_checksum,
            "events": [
                {
                    "seq": e.seq,
                    "event_id": e.event_id,
                    "kind": e.kind.value,
                    "payload": e.payload,
                    "voice_session_id": e.voice_session_id,
                }
                for e in events
            ],
        }
    )


@dataclass(frozen=True, slots=True)
class NewCheckpoint:
    """A checkpoint to store: the summary of events ``1 … to_seq`` (see the module docstring)."""

    from_seq: int
    to_seq: int
    summary: str
    checksum: str
    previous_checksum: str | None
    summarizer: str

    def __post_init__(self) -> None:
        if self.from_seq < 1 or self.to_seq < self.from_seq:
            raise ValueError(f"bad checkpoint range {self.from_seq}…{self.to_seq}")
        if len(self.summary) > MAX_SUMMARY_CHARS:
            raise ValueError(f"a summary holds at most {MAX_SUMMARY_CHARS} characters")

    def digest(self) -> str:
        """SHA-256 over every field: what a stored checkpoint must still match."""
        return canonical_digest(
            {
                "from_seq": self.from_seq,
                "to_seq": self.to_seq,
                "summary": self.summary,
                "checksum": self.checksum,
                "previous_checksum": self.previous_checksum,
                "summarizer": self.summarizer,
            }
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    thread: ThreadRef
    from_seq: int
    to_seq: int
    summary: str
    checksum: str
    previous_checksum: str | None
    summarizer: str
    digest: str
    created_at: datetime = field(compare=False)

    def content(self) -> NewCheckpoint:
        return NewCheckpoint(
            from_seq=self.from_seq,
            to_seq=self.to_seq,
            summary=self.summary,
            checksum=self.checksum,
            previous_checksum=self.previous_checksum,
            summarizer=self.summarizer,
        )

    def intact(self) -> bool:
        """Whether the stored fields still match the digest written with them."""
        try:
            return self.content().digest() == self.digest
        except ValueError:
            return False

    def verifies(self, segment: Sequence[JournalEvent]) -> bool:
        """Whether ``segment`` is exactly this checkpoint's source events, unchanged."""
        expected = range(self.from_seq, self.to_seq + 1)
        if len(segment) != len(expected) or any(
            e.seq != s for e, s in zip(segment, expected, strict=True)
        ):
            return False
        return self.intact() and source_checksum(segment, self.previous_checksum) == self.checksum


class CheckpointStore(Protocol):
    async def put(self, thread: ThreadRef, checkpoint: NewCheckpoint) -> Checkpoint:
        """Extend the thread's chain (rules 2 and 3); returns the stored checkpoint."""
        ...

    async def latest(
        self, thread: ThreadRef, *, before_seq: int | None = None
    ) -> Checkpoint | None:
        """The checkpoint with the highest ``to_seq`` (below ``before_seq`` when given)."""
        ...

    async def list(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int = 100
    ) -> list[Checkpoint]:
        """Checkpoints with ``from_seq > after_seq`` in chain order, at most ``limit``."""
        ...

    async def delete_thread(self, thread: ThreadRef) -> int:
        """Erase a thread's checkpoints; returns how many were removed."""
        ...


class InMemoryCheckpointStore:
    """Checkpoints for tests and runs without a database. Same rules as the PostgreSQL store."""

    def __init__(self) -> None:
        self._chains: dict[ThreadRef, list[Checkpoint]] = {}
        self._lock = asyncio.Lock()

    async def put(self, thread: ThreadRef, checkpoint: NewCheckpoint) -> Checkpoint:
        async with self._lock:
            chain = self._chains.setdefault(thread, [])
            for stored in chain:
                if stored.from_seq == checkpoint.from_seq:
                    if stored.content() == checkpoint:
                        return stored
                    raise CheckpointConflict(
                        f"another checkpoint already starts at seq {checkpoint.from_seq}"
                    )
            head = chain[-1] if chain else None
            head_seq = head.to_seq if head else 0
            head_checksum = head.checksum if head else None
            if checkpoint.from_seq != head_seq + 1:
                raise CheckpointConflict(
                    f"the chain ends at seq {head_seq}; "
                    f"a checkpoint from seq {checkpoint.from_seq} does not extend it"
                )
            if checkpoint.previous_checksum != head_checksum:
                raise CheckpointConflict("previous_checksum is not the latest checkpoint's")
            stored = Checkpoint(
                thread=thread,
                from_seq=checkpoint.from_seq,
                to_seq=checkpoint.to_seq,
                summary=checkpoint.summary,
                checksum=checkpoint.checksum,
                previous_checksum=checkpoint.previous_checksum,
                summarizer=checkpoint.summarizer,
                digest=checkpoint.digest(),
                created_at=datetime.now(UTC),
            )
            chain.append(stored)
            return stored

    async def latest(
        self, thread: ThreadRef, *, before_seq: int | None = None
    ) -> Checkpoint | None:
        for stored in reversed(self._chains.get(thread, [])):
            if before_seq is None or stored.to_seq < before_seq:
                return stored
        return None

    async def list(
        self, thread: ThreadRef, *, after_seq: int = 0, limit: int = 100
    ) -> list[Checkpoint]:
        limit = max(0, min(limit, MAX_LIST))
        return [c for c in self._chains.get(thread, []) if c.from_seq > after_seq][:limit]

    async def delete_thread(self, thread: ThreadRef) -> int:
        async with self._lock:
            return len(self._chains.pop(thread, []))
