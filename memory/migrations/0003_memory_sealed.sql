-- Encryption at rest (SPEC RM-8; memory/crypto.py, memory/postgres_store.py). An entry's content
-- lives in content_sealed (AES-256-GCM: nonce + ciphertext + tag, associated data naming the
-- row) under the key key_id; content_hash becomes an HMAC under a key derived from that key.
-- The plaintext column stays only as '' (so old readers see no content): rows written before
-- this migration are sealed in place, in batches, when the store first starts
-- (PostgresMemoryStore.seal_plaintext); NOT VALID makes the check hold for every new write at
-- once while those old rows wait. The change log never held content and is unchanged.

ALTER TABLE memory_entries
    ADD COLUMN key_id          text,
    ADD COLUMN content_sealed  bytea,
    ALTER COLUMN content SET DEFAULT '';

ALTER TABLE memory_entries
    ADD CONSTRAINT memory_entries_no_plaintext CHECK (content = '') NOT VALID;

-- Rows still to seal (empty once the first start has sealed them) …
CREATE INDEX memory_entries_plaintext ON memory_entries (tenant, owner, id) WHERE content <> '';
-- … and rows to re-encrypt after a rotation.
CREATE INDEX memory_entries_key_id ON memory_entries (key_id) WHERE content_sealed IS NOT NULL;
