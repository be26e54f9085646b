-- Summary checkpoints (SPEC J-4). Rules in journal/checkpoints.py; how they are kept here in
-- journal/postgres_checkpoints.py.

-- One row per checkpoint; a thread's rows form a chain 1…a, a+1…b, … (rule 2). The primary key
-- on from_seq makes two compactions racing to extend the chain collide instead of forking it;
-- the unique to_seq index serves "the latest checkpoint before seq n" as one index probe.
-- Erasing the thread's journal (its journal_threads row) erases its checkpoints.
CREATE TABLE journal_checkpoints (
    tenant            text        NOT NULL,
    user_id           text        NOT NULL,
    thread_id         text        NOT NULL,
    from_seq          bigint      NOT NULL CHECK (from_seq > 0),
    to_seq            bigint      NOT NULL,
    summary           text        NOT NULL CHECK (char_length(summary) <= 16000),
    -- SHA-256 over the canonical JSON of the source events and the previous checksum.
    checksum          text        NOT NULL,
    previous_checksum text,
    summarizer        text        NOT NULL,
    -- SHA-256 over the fields above (journal.checkpoints.NewCheckpoint.digest).
    digest            text        NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, thread_id, from_seq),
    UNIQUE (tenant, user_id, thread_id, to_seq),
    CHECK (to_seq >= from_seq),
    FOREIGN KEY (tenant, user_id, thread_id)
        REFERENCES journal_threads (tenant, user_id, thread_id) ON DELETE CASCADE
);
