-- Tenants, users, memberships and bearer tokens (SPEC ACC-1, ACC-2): accounts/store.py's rules.
-- Replaces runtime's account_tokens (runtime/0001): every token there keeps working, under a
-- membership of its (tenant, user); the local user becomes the owner of the tenant "local".

CREATE TABLE tenants (
    id          text        PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id          text        PRIMARY KEY,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
    tenant      text        NOT NULL REFERENCES tenants (id),
    user_id     text        NOT NULL REFERENCES users (id),
    role        text        NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
    disabled_at timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id)
);

-- Only SHA-256 hashes of tokens are kept; id is what lists show and revoke takes.
CREATE TABLE access_tokens (
    id            text        PRIMARY KEY,
    token_hash    text        NOT NULL UNIQUE,
    tenant        text        NOT NULL,
    user_id       text        NOT NULL,
    name          text        NOT NULL,
    scopes        text[]      NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    last_used_at  timestamptz,
    revoked_at    timestamptz,
    FOREIGN KEY (tenant, user_id) REFERENCES memberships (tenant, user_id) ON DELETE CASCADE
);
CREATE INDEX access_tokens_of_user ON access_tokens (tenant, user_id, created_at);

INSERT INTO tenants (id, created_at)
    SELECT tenant, min(created_at) FROM account_tokens GROUP BY tenant;
INSERT INTO users (id, created_at)
    SELECT user_id, min(created_at) FROM account_tokens GROUP BY user_id;
INSERT INTO memberships (tenant, user_id, role, created_at)
    SELECT tenant, user_id,
           CASE WHEN tenant = 'local' AND user_id = 'local-user' THEN 'owner' ELSE 'member' END,
           min(created_at)
      FROM account_tokens GROUP BY tenant, user_id;
INSERT INTO access_tokens (id, token_hash, tenant, user_id, name, scopes, created_at)
    SELECT 'tok_' || substr(md5(token_hash), 1, 16), token_hash, tenant, user_id,
           CASE WHEN tenant = 'local' AND user_id = 'local-user' THEN 'local' ELSE 'migrated' END,
           CASE WHEN tenant = 'local' AND user_id = 'local-user'
                THEN ARRAY['api', 'metrics'] ELSE ARRAY['api'] END,
           created_at
      FROM account_tokens;

DROP TABLE account_tokens;
