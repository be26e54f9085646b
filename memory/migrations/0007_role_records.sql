-- Role memory's records beside its pool (SPEC RM-4…RM-8): settings, confessions, enrichments and
-- the memory-model call log. Rules in memory/role_records.py; how they are kept here in
-- memory/postgres_role_records.py. Ids, times, entry ids and costs are plaintext so listing and
-- budgeting never decrypt; every text is an AES-GCM ciphertext bound to its row and column,
-- its key id beside it.

CREATE TABLE role_memory_settings (
    tenant              text        NOT NULL,
    role_id             text        NOT NULL,
    memory_model        text,
    concurrency         integer     CHECK (concurrency > 0),
    budget_period       text        CHECK (budget_period IN ('day', 'month')),
    budget_limit_micros bigint      CHECK (budget_limit_micros >= 0),
    revision            integer     NOT NULL CHECK (revision > 0),
    key_id              text        NOT NULL,
    instructions_sealed bytea       NOT NULL,
    updated_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((budget_period IS NULL) = (budget_limit_micros IS NULL)),
    PRIMARY KEY (tenant, role_id)
);

CREATE TABLE role_memory_confessions (
    tenant          text        NOT NULL,
    role_id         text        NOT NULL,
    id              text        NOT NULL,
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    thread_id       text        NOT NULL,
    user_id         text        NOT NULL,
    turn_seq        bigint      NOT NULL,
    answered_by     text        NOT NULL CHECK (answered_by IN ('memory_model', 'calm')),
    at              timestamptz NOT NULL,
    key_id          text        NOT NULL,
    text_sealed     bytea       NOT NULL,
    answer_sealed   bytea       NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX role_memory_confessions_thread ON role_memory_confessions (tenant, thread_id, seq);
CREATE INDEX role_memory_confessions_role ON role_memory_confessions (tenant, role_id);

CREATE TABLE role_memory_enrichments (
    tenant          text        NOT NULL,
    role_id         text        NOT NULL,
    id              text        NOT NULL,
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    thread_id       text        NOT NULL,
    turn_seq        bigint      NOT NULL,
    entry_ids       text[]      NOT NULL,
    at              timestamptz NOT NULL,
    key_id          text        NOT NULL,
    text_sealed     bytea       NOT NULL,
    original_sealed bytea       NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX role_memory_enrichments_thread ON role_memory_enrichments (tenant, thread_id, seq);
CREATE INDEX role_memory_enrichments_role ON role_memory_enrichments (tenant, role_id);

CREATE TABLE role_memory_calls (
    tenant          text        NOT NULL,
    role_id         text        NOT NULL,
    id              text        NOT NULL,
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    purpose         text        NOT NULL CHECK (purpose IN ('confide', 'enrich', 'learn')),
    model           text        NOT NULL,
    -- Provider-confirmed cost in micro-USD; NULL: usage missing (unknown, never charged).
    cost_micros     bigint      CHECK (cost_micros >= 0),
    thread_id       text,
    at              timestamptz NOT NULL,
    key_id          text        NOT NULL,
    request_sealed  bytea       NOT NULL,
    response_sealed bytea       NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE INDEX role_memory_calls_role ON role_memory_calls (tenant, role_id, seq);
CREATE INDEX role_memory_calls_spent ON role_memory_calls (tenant, role_id, at);
