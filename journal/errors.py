"""Journal errors.

```
JournalError                 base
├── EventConflict            an event id was reused with different content (remote: caller bug)
├── ThreadNotFound           no such thread for this tenant/user
├── CheckpointConflict       a checkpoint does not extend the thread's chain (lost a race)
├── WriterFenced             a writer's epoch was superseded (another process took it over)
└── JournalUnavailable       the store cannot be reached (retryable)
```
"""

from __future__ import annotations


class JournalError(Exception):
    code = "journal_error"
    retryable = False


class EventConflict(JournalError):
    code = "journal_event_conflict"


class ThreadNotFound(JournalError):
    code = "thread_not_found"


class CheckpointConflict(JournalError):
    code = "journal_checkpoint_conflict"


class WriterFenced(JournalError):
    """``append_fenced`` at an epoch older than the writer's fence (``journal/store.py``
    rule 4): nothing was written, and nothing this writer appends at that epoch ever will be."""

    code = "journal_writer_fenced"


class JournalUnavailable(JournalError):
    code = "journal_unavailable"
    retryable = True
