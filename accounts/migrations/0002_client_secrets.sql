-- Client secrets (ek_…): short-lived keys a token mints for one page's realtime sessions,
-- bound to its (tenant, user) and one agent role; accounts/store.py rule 7. Only SHA-256
-- hashes are kept. They go with their minting token and their membership.

CREATE TABLE client_secrets (
    id           text        PRIMARY KEY,
    secret_hash  text        NOT NULL UNIQUE,
    tenant       text        NOT NULL,
    user_id      text        NOT NULL,
    role_id      text        NOT NULL,
    token_id     text        NOT NULL REFERENCES access_tokens (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    FOREIGN KEY (tenant, user_id) REFERENCES memberships (tenant, user_id) ON DELETE CASCADE
);
CREATE INDEX client_secrets_of_user ON client_secrets (tenant, user_id, expires_at);
CREATE INDEX client_secrets_of_token ON client_secrets (token_id);
