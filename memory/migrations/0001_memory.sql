-- Long-term memory per user and role (SPEC MEM-1 … MEM-8). Rules in memory/entries.py and
-- memory/store.py; how they are kept here in memory/postgres_store.py.
-- Every row is keyed by (tenant, owner): owner is the SHA-256 (hex) of the user id, the user's
-- partition; the user id itself is not stored.

CREATE TABLE memory_entries (
    tenant            text        NOT NULL,
    owner             text        NOT NULL,
    id                text        NOT NULL,
    role_id           text        NOT NULL,
    kind              text        NOT NULL
        CHECK (kind IN ('preference', 'goal', 'correction', 'relation', 'fact')),
    key               text,
    content           text        NOT NULL CHECK (char_length(content) <= 300),
    content_hash      text        NOT NULL,
    origin            text        NOT NULL CHECK (origin IN ('extraction', 'person')),
    source_thread_id  text,
    source_seq        bigint,
    stated_at         timestamptz NOT NULL,
    status            text        NOT NULL CHECK (status IN ('active', 'deleted')),
    revision          integer     NOT NULL CHECK (revision > 0),
    created_at        timestamptz NOT NULL,
    updated_at        timestamptz NOT NULL,
    PRIMARY KEY (tenant, owner, id)
);

-- Injection and listing: a role's active entries, most recently updated first.
CREATE INDEX memory_entries_recent
    ON memory_entries (tenant, owner, role_id, updated_at DESC)
    WHERE status = 'active';
-- One active entry per stable key, and no exact duplicates, per user×role.
CREATE UNIQUE INDEX memory_entries_key
    ON memory_entries (tenant, owner, role_id, key)
    WHERE status = 'active' AND key IS NOT NULL;
CREATE UNIQUE INDEX memory_entries_content
    ON memory_entries (tenant, owner, role_id, content_hash)
    WHERE status = 'active';
-- Deleting a conversation's memories finds them by source.
CREATE INDEX memory_entries_source
    ON memory_entries (tenant, owner, source_thread_id)
    WHERE source_thread_id IS NOT NULL;

-- The change log: who (extraction or person) did what to which entry, when. No content.
CREATE TABLE memory_changes (
    seq               bigserial   PRIMARY KEY,
    tenant            text        NOT NULL,
    owner             text        NOT NULL,
    entry_id          text        NOT NULL,
    role_id           text        NOT NULL,
    action            text        NOT NULL,
    actor             text        NOT NULL CHECK (actor IN ('extraction', 'person')),
    at                timestamptz NOT NULL,
    revision          integer     NOT NULL,
    kind              text        NOT NULL,
    key               text,
    source_thread_id  text
);
CREATE INDEX memory_changes_role ON memory_changes (tenant, owner, role_id, seq DESC);

-- Deletion receipts: written in the transaction that deletes a conversation's memories.
CREATE TABLE memory_receipts (
    tenant            text        NOT NULL,
    owner             text        NOT NULL,
    receipt_id        text        NOT NULL,
    source_thread_id  text        NOT NULL,
    deleted           integer     NOT NULL,
    entry_ids         text[]      NOT NULL,
    at                timestamptz NOT NULL,
    PRIMARY KEY (tenant, owner, receipt_id)
);

-- Source blocks: statements of a source thread made up to `through` (NULL: ever) are not
-- extracted again, for role_id ('' : every role). reason 'deleted' is the tombstone of a
-- deleted conversation; 'edited' comes from a person's edit or delete of an entry.
CREATE TABLE memory_source_blocks (
    tenant            text        NOT NULL,
    owner             text        NOT NULL,
    role_id           text        NOT NULL,
    source_thread_id  text        NOT NULL,
    through           timestamptz,
    reason            text        NOT NULL CHECK (reason IN ('deleted', 'edited')),
    at                timestamptz NOT NULL
);
CREATE INDEX memory_source_blocks_source
    ON memory_source_blocks (tenant, owner, source_thread_id);
