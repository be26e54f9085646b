-- Knowledge base (SPEC KB-1..KB-3): documents per (tenant, user), their chunks with embeddings
-- computed at ingest, role bindings, and a per-owner version that every write bumps (search
-- indexes cached in a process reload when it changes).
CREATE TABLE knowledge_owners (
    tenant      text    NOT NULL,
    user_id     text    NOT NULL,
    version     bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, user_id)
);

CREATE TABLE knowledge_documents (
    tenant      text        NOT NULL,
    user_id     text        NOT NULL,
    id          text        NOT NULL,
    name        text        NOT NULL,
    body        text        NOT NULL,
    chunk_count integer     NOT NULL,
    name_embedding bytea,   -- the name's vector (float32), for the specificity rule
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, user_id, id)
);

CREATE TABLE knowledge_chunks (
    tenant      text    NOT NULL,
    user_id     text    NOT NULL,
    document_id text    NOT NULL,
    ordinal     integer NOT NULL,
    body        text    NOT NULL,
    embedding   bytea,  -- float32 little-endian, L2-normalised; NULL when made without a model
    PRIMARY KEY (tenant, user_id, document_id, ordinal),
    FOREIGN KEY (tenant, user_id, document_id)
        REFERENCES knowledge_documents (tenant, user_id, id) ON DELETE CASCADE
);

CREATE TABLE knowledge_bindings (
    tenant      text    NOT NULL,
    user_id     text    NOT NULL,
    role_id     text    NOT NULL,
    document_id text    NOT NULL,
    PRIMARY KEY (tenant, user_id, role_id, document_id),
    FOREIGN KEY (tenant, user_id, document_id)
        REFERENCES knowledge_documents (tenant, user_id, id) ON DELETE CASCADE
);
CREATE INDEX knowledge_bindings_by_document ON knowledge_bindings (tenant, user_id, document_id);
