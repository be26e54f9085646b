-- The runtime's own tables: who may connect, the roles they talk to, and the threads
-- (conversations) they own. Every row is scoped by tenant (and user where it has one).

-- Bearer tokens, stored only as SHA-256 hashes.
CREATE TABLE account_tokens (
    token_hash  text        PRIMARY KEY,
    tenant      text        NOT NULL,
    user_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE roles (
    tenant          text        NOT NULL,
    id              text        NOT NULL,
    name            text        NOT NULL,
    instructions    text        NOT NULL,
    voice           text,
    language        text,
    memory_enabled  boolean     NOT NULL,
    is_default      boolean     NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, id)
);
-- At most one default role per tenant, even when two processes create it at once.
CREATE UNIQUE INDEX roles_one_default ON roles (tenant) WHERE is_default;

CREATE TABLE threads (
    tenant      text        NOT NULL,
    user_id     text        NOT NULL,
    thread_id   text        NOT NULL,
    role_id     text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, thread_id)
);
