-- The role-memory pools (SPEC RM-1…3, RM-7, RM-8). Rules in memory/pool.py and
-- memory/pool_store.py; how they are kept here in memory/postgres_pool_store.py.
-- Metadata is plaintext so visibility, listing and purge need no decryption; content and the
-- change log's notes are AES-GCM ciphertexts (key id beside them), bound to their row.

CREATE TABLE role_pool_entries (
    tenant          text        NOT NULL,
    role_id         text        NOT NULL,
    id              text        NOT NULL,
    layer           text        NOT NULL CHECK (layer IN ('fact', 'observation', 'pinned')),
    tags            text[]      NOT NULL,
    -- [{"thread": id, "item": id} | {"entry": id}, …] in the entry's order.
    sources         jsonb       NOT NULL,
    -- The entry ids among sources: what a purge follows to the entries derived from others.
    source_entries  text[]      NOT NULL,
    -- [{"thread": id, "item": id, "users": [user, …]}, …]: who was present when learned.
    access          jsonb       NOT NULL,
    confidence      double precision CHECK (confidence BETWEEN 0 AND 1),
    created_at      timestamptz NOT NULL,
    invalidated_at  timestamptz,
    retracted       boolean     NOT NULL DEFAULT false,
    version         integer     NOT NULL CHECK (version > 0),
    key_id          text        NOT NULL,
    content_sealed  bytea       NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, role_id, id)
);

CREATE INDEX role_pool_entries_tags ON role_pool_entries USING gin (tags);
CREATE INDEX role_pool_entries_source_entries ON role_pool_entries USING gin (source_entries);

CREATE TABLE role_pool_changes (
    tenant          text        NOT NULL,
    role_id         text        NOT NULL,
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    entry_id        text        NOT NULL,
    version         integer     NOT NULL,
    at              timestamptz NOT NULL,
    by_actor        text        NOT NULL CHECK (by_actor IN ('memory_model', 'person')),
    action          text        NOT NULL
        CHECK (action IN ('add', 'update', 'invalidate', 'forget')),
    note_key_id     text,
    note_sealed     bytea,
    CHECK ((note_key_id IS NULL) = (note_sealed IS NULL)),
    PRIMARY KEY (tenant, role_id, seq)
);

CREATE INDEX role_pool_changes_entry ON role_pool_changes (tenant, role_id, entry_id);

-- One row per pool: bumped by every write in the writer's transaction, so a reader that finds
-- the version it cached in its snapshot may reuse the metadata it decoded then.
CREATE TABLE role_pool_heads (
    tenant          text        NOT NULL,
    role_id         text        NOT NULL,
    version         bigint      NOT NULL,
    PRIMARY KEY (tenant, role_id)
);
