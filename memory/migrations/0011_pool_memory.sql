-- Per-user memory as entries of the role's pool (SPEC MEM-1 … MEM-8 over RM-1 … RM-3, issue 18;
-- memory/pool.py rule 10, memory/pool_memory.py). What per-user memory keeps beside an entry is
-- plaintext metadata like the rest of the row: its kind, stable key, origin, when the user
-- stated it and when it last changed. All NULL on the entries the memory model learns.
-- Numbered 0011: 0007–0010 landed while it was written.

ALTER TABLE role_pool_entries
    ADD COLUMN personal_kind        text
        CHECK (personal_kind IN ('preference', 'goal', 'correction', 'relation', 'fact')),
    ADD COLUMN personal_key         text,
    ADD COLUMN personal_origin      text CHECK (personal_origin IN ('extraction', 'person')),
    ADD COLUMN personal_stated_at   timestamptz,
    ADD COLUMN personal_updated_at  timestamptz,
    ADD CONSTRAINT role_pool_entries_personal CHECK (
        (personal_kind IS NULL) = (personal_origin IS NULL)
        AND (personal_kind IS NULL) = (personal_stated_at IS NULL)
        AND (personal_kind IS NULL) = (personal_updated_at IS NULL)
        AND (personal_kind IS NOT NULL OR personal_key IS NULL)
    );

-- MEM's ledger (memory_changes, memory_receipts, memory_source_blocks of migration 0001) stays
-- where it is; the change log also says which role an entry id is in.
CREATE INDEX memory_changes_entry ON memory_changes (tenant, owner, entry_id);
