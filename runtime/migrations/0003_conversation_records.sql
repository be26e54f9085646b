-- Conversation records (SPEC CONV-1 … CONV-4): the transcripts the history page shows. Rules in
-- runtime/records.py; how they are kept here in runtime/postgres_records.py. Display data only:
-- the model's history comes from the journal. No resume token is ever stored here.

CREATE TABLE conversation_records (
    tenant           text        NOT NULL,
    user_id          text        NOT NULL,
    id               text        NOT NULL,
    title            text,
    role_id          text,
    thread_id        text,
    voice_session_id text,
    message_count    integer     NOT NULL DEFAULT 0 CHECK (message_count >= 0),
    -- 0 only inside the transaction that creates the record; every committed write adds one.
    version          bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, id)
);
CREATE INDEX conversation_records_recent
    ON conversation_records (tenant, user_id, updated_at DESC, id DESC);
CREATE INDEX conversation_records_by_thread
    ON conversation_records (tenant, user_id, thread_id) WHERE thread_id IS NOT NULL;

CREATE TABLE conversation_messages (
    tenant     text        NOT NULL,
    user_id    text        NOT NULL,
    record_id  text        NOT NULL,
    idx        integer     NOT NULL CHECK (idx >= 0),
    role       text        NOT NULL,
    text       text        NOT NULL,
    at         timestamptz,
    PRIMARY KEY (tenant, user_id, record_id, idx),
    FOREIGN KEY (tenant, user_id, record_id)
        REFERENCES conversation_records (tenant, user_id, id) ON DELETE CASCADE
);

-- Idempotency keys of accepted segments, with the result the first write returned.
CREATE TABLE conversation_segment_keys (
    tenant           text        NOT NULL,
    user_id          text        NOT NULL,
    record_id        text        NOT NULL,
    idempotency_key  text        NOT NULL,
    fingerprint      text        NOT NULL,
    version          bigint      NOT NULL,
    message_count    integer     NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, record_id, idempotency_key),
    FOREIGN KEY (tenant, user_id, record_id)
        REFERENCES conversation_records (tenant, user_id, id) ON DELETE CASCADE
);
CREATE INDEX conversation_segment_keys_age
    ON conversation_segment_keys (tenant, user_id, record_id, created_at);
