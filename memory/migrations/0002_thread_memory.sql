-- Thread memory (SPEC TM-1 … TM-5). Rules in memory/thread_memory.py and memory/thread_store.py;
-- how they are kept here in memory/postgres_thread_store.py.
-- One row per thread, keyed by (tenant, owner, thread_id): owner is the SHA-256 (hex) of the
-- user id. The facts are one JSONB object (key -> fact): a thread keeps a short list and every
-- change rewrites it under a compare-and-set on revision.

CREATE TABLE thread_memory (
    tenant            text        NOT NULL,
    owner             text        NOT NULL,
    thread_id         text        NOT NULL,
    revision          integer     NOT NULL CHECK (revision > 0),
    facts             jsonb       NOT NULL,
    processed         text[]      NOT NULL,
    use_override      boolean,
    generate_override boolean,
    last_failure      text,
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, owner, thread_id)
);

-- The tenant's switches; no row means both on.
CREATE TABLE thread_memory_defaults (
    tenant            text        PRIMARY KEY,
    use_memory        boolean     NOT NULL,
    generate_memory   boolean     NOT NULL
);
