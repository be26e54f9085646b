-- A user's own switches for a role (SPEC ACC-2): today memory_enabled. The role's own value is
-- the admin's default; an override only ever narrows it (runtime/roles.py).
CREATE TABLE role_user_settings (
    tenant          text        NOT NULL,
    user_id         text        NOT NULL,
    role_id         text        NOT NULL,
    memory_enabled  boolean,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, role_id),
    FOREIGN KEY (tenant, role_id) REFERENCES roles (tenant, id) ON DELETE CASCADE
);
