-- Durable learning runs (SPEC RM-4, RM-6, RM-8). Rules in memory/learning_runs.py; how they
-- are kept here in memory/postgres_learning_runs.py. Numbered 0005 to leave 0003 and 0004 to
-- the role-memory pool and its encryption, built at the same time.
-- Rows carry ids and positions only: a step's request is a digest and its response opaque bytes
-- (sealed by memory.learning_runs.StepPayloads).

CREATE TABLE learning_runs (
    id                text        PRIMARY KEY,
    tenant            text        NOT NULL,
    role_id           text        NOT NULL,
    thread_id         text        NOT NULL,
    user_id           text        NOT NULL,
    up_to_seq         bigint      NOT NULL CHECK (up_to_seq > 0),
    state             text        NOT NULL
        CHECK (state IN ('queued', 'running', 'done', 'failed', 'superseded')),
    attempts          integer     NOT NULL DEFAULT 0,
    error_code        text,
    claim_token       text,
    lease_expires_at  timestamptz,
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((state = 'running') = (claim_token IS NOT NULL))
);

CREATE INDEX learning_runs_thread ON learning_runs (tenant, role_id, thread_id, up_to_seq);
CREATE INDEX learning_runs_queued ON learning_runs (created_at, id) WHERE state = 'queued';
CREATE INDEX learning_runs_running ON learning_runs (lease_expires_at) WHERE state = 'running';

CREATE TABLE learning_run_steps (
    run_id            text        NOT NULL REFERENCES learning_runs (id) ON DELETE CASCADE,
    step              integer     NOT NULL CHECK (step > 0),
    request_digest    text        NOT NULL,
    response          bytea,
    attempts          integer     NOT NULL,
    state             text        NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (run_id, step)
);

-- The read position: journal items up to learned_up_to_seq have been learned from.
CREATE TABLE learning_positions (
    tenant            text        NOT NULL,
    role_id           text        NOT NULL,
    thread_id         text        NOT NULL,
    learned_up_to_seq bigint      NOT NULL CHECK (learned_up_to_seq >= 0),
    updated_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, role_id, thread_id)
);
