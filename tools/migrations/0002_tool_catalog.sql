-- Declared HTTP tools per (tenant, role) and the tenants' tool secrets (SPEC TOOL-1;
-- tools/postgres_catalog.py). A declaration is its checked record as JSON (tools/catalog.py
-- tool_record); seq keeps declaration order. A secret's value is sealed with the memory
-- keyring (AES-256-GCM, bound to its tenant and name): the database never holds it in clear.
CREATE TABLE tool_declarations (
    tenant      text        NOT NULL,
    role_id     text        NOT NULL,
    name        text        NOT NULL,
    seq         bigserial   NOT NULL,
    declaration jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, role_id, name)
);
CREATE INDEX tool_declarations_by_role ON tool_declarations (tenant, role_id, seq);

CREATE TABLE tool_secrets (
    tenant       text        NOT NULL,
    name         text        NOT NULL,
    key_id       text        NOT NULL,
    value_sealed bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, name)
);
CREATE INDEX tool_secrets_by_key ON tool_secrets (key_id);
