"""Expired recordings deleted for good (SPEC REC-4).

Rules
-----
1. A run claims the recordings whose ``retain_until`` has passed and that are not protected
   (``RecordingIndex.claim_expired``: marked ``deleting_since``), the longest expired first,
   at most ``batch``; ones claimed by a run that died come again.
2. Each is deleted in two steps, always in this order: its audio from the store (every piece;
   idempotent), then its row, which leaves a deletion receipt in the same statement
   (``RecordingIndex.remove``). A process that dies between the two leaves a row whose audio
   is gone; the next run finds the row again, the store has nothing more to delete, and the
   row goes with its receipt — never a file without its row, never a row kept for audio that
   is gone.
3. A legal hold wins before a deletion begins: a protected recording is never claimed, and a
   hold cannot be put on a claimed one (``RecordingBeingDeleted``: its audio may be gone) —
   so no hold is ever put on audio that is being deleted.
4. Processes may run it at once: the store's delete is idempotent and only one ``remove``
   returns the receipt.
"""

from __future__ import annotations

import logging
from datetime import datetime

from records.audio_store import AudioStore
from records.recordings import DeletionReceipt, RecordingIndex

log = logging.getLogger(__name__)

BATCH = 100


async def expire_recordings(
    index: RecordingIndex, store: AudioStore, *, now: datetime, batch: int = BATCH
) -> list[DeletionReceipt]:
    """Rules 1–4: one run; the receipts of what it deleted."""
    receipts: list[DeletionReceipt] = []
    for recording in await index.claim_expired(now, batch):
        await store.delete(recording.id)
        reason = recording.deletion_reason or "expired"
        receipt = await index.remove(recording.tenant, recording.id, reason=reason, at=now)
        if receipt is None:
            log.warning("recording %s: its audio was deleted but its row was not", recording.id)
            continue
        receipts.append(receipt)
    if receipts:
        log.info("recordings: %d expired and deleted", len(receipts))
    return receipts
