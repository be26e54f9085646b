-- Encryption at rest for thread memory (SPEC RM-8 applied to TM; memory/postgres_thread_store.py).
-- A thread's facts (keys, contents, sources) live in facts_sealed (AES-256-GCM, associated data
-- naming the row) under key_id; the plaintext column stays NULL. Rows written before this
-- migration are sealed in place, in batches, on the store's first start
-- (PostgresThreadMemoryStore.seal_plaintext); NOT VALID makes the check hold for every new
-- write at once while those old rows wait.

ALTER TABLE thread_memory
    ADD COLUMN key_id        text,
    ADD COLUMN facts_sealed  bytea,
    ALTER COLUMN facts DROP NOT NULL;

ALTER TABLE thread_memory
    ADD CONSTRAINT thread_memory_no_plaintext CHECK (facts IS NULL) NOT VALID;

CREATE INDEX thread_memory_plaintext ON thread_memory (tenant, owner, thread_id)
    WHERE facts IS NOT NULL;
CREATE INDEX thread_memory_key_id ON thread_memory (key_id) WHERE facts_sealed IS NOT NULL;
