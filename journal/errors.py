"""Journal errors.

```
JournalError                 base
├── EventConflict            an event id was reused with different content (remote: caller bug)
├── ThreadNotFound           no such thread for this tenant/user
├── CheckpointConflict       a checkpoint does not extend the thread's chain (lost a race)
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


class JournalUnavailable(JournalError):
    code = "journal_unavailable"
    retryable = True
