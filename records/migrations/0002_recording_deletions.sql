-- Deletion receipts (SPEC REC-4): a recording deleted for good leaves this row — what it was,
-- whose, how large, why and when — and nothing of its audio.
CREATE TABLE recording_deletions (
    tenant        text        NOT NULL,
    recording_id  text        NOT NULL,
    user_id       text        NOT NULL,
    session_id    text        NOT NULL,
    thread_id     text        NOT NULL,
    duration_ms   bigint      NOT NULL,
    size_bytes    bigint      NOT NULL,
    reason        text        NOT NULL,
    deleted_at    timestamptz NOT NULL,
    PRIMARY KEY (tenant, recording_id)
);

-- A recording whose deletion has begun (its audio may be partly gone): a legal hold can no
-- longer be put on it, and the deletion is finished by the next run (records/expiry.py).
ALTER TABLE recordings ADD COLUMN deleting_since timestamptz;
-- Why it is to be deleted when that is not its retention running out: 'requested' (the owner
-- deleted its conversation and asked for its recordings to go too).
ALTER TABLE recordings ADD COLUMN deletion_reason text;
