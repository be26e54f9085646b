-- Tool permissions (SPEC TOOL-2, TOOL-3): grants, rules and cached judgements per (tenant, role).
-- Capabilities keep their arguments as canonical JSON text (tools/capability.py), compared in
-- code; seq orders grants and rules by creation (the policy's "first allow").
CREATE TABLE tool_grants (
    tenant          text        NOT NULL,
    id              text        NOT NULL,
    seq             bigserial   NOT NULL,
    role_id         text        NOT NULL,
    action          text        NOT NULL,
    target          text        NOT NULL,
    arguments       text,       -- canonical JSON; NULL: any arguments
    effect          text        NOT NULL CHECK (effect IN ('allow', 'deny')),
    scope           text        NOT NULL CHECK (scope IN ('once', 'thread', 'lifetime')),
    thread_id       text,
    granted_by_kind text        NOT NULL CHECK (granted_by_kind IN ('person', 'role', 'rule')),
    granted_by_id   text        NOT NULL,
    parent          text,
    status          text        NOT NULL CHECK (status IN ('active', 'used', 'revoked')),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, id),
    CHECK (scope <> 'thread' OR thread_id IS NOT NULL)
);
CREATE INDEX tool_grants_active ON tool_grants (tenant, role_id, action, seq)
    WHERE status = 'active';
CREATE INDEX tool_grants_by_role ON tool_grants (tenant, role_id, seq);
CREATE INDEX tool_grants_by_parent ON tool_grants (tenant, parent) WHERE parent IS NOT NULL;

CREATE TABLE tool_rules (
    tenant      text        NOT NULL,
    role_id     text        NOT NULL,
    id          text        NOT NULL,
    seq         bigserial   NOT NULL,
    body        text        NOT NULL,
    author_kind text        NOT NULL CHECK (author_kind IN ('person', 'role')),
    author_id   text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('active', 'proposed', 'retired')),
    version     integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, role_id, id)
);
CREATE INDEX tool_rules_by_role ON tool_rules (tenant, role_id, seq);

-- One judgement per (the active rules' ids and versions, the capability, the judge): key is
-- their SHA-256 (tools/judgements.py). Oldest rows beyond the per-role bound are pruned.
CREATE TABLE tool_judgements (
    tenant      text        NOT NULL,
    role_id     text        NOT NULL,
    key         text        NOT NULL,
    effect      text        NOT NULL CHECK (effect IN ('allow', 'deny', 'none')),
    quotes      jsonb       NOT NULL,
    reason      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant, role_id, key)
);
CREATE INDEX tool_judgements_by_age ON tool_judgements (tenant, role_id, created_at);
