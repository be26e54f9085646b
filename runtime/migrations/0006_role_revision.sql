-- Each role's revision (runtime/roles.py rules 1-3): 1 at creation, +1 per update; edits and
-- deletes may name the revision they read, and a stale one changes nothing.
ALTER TABLE roles ADD COLUMN revision integer NOT NULL DEFAULT 1 CHECK (revision >= 1);

-- How many threads a role's deletion leaves unresumable (GET /api/roles/{id}/impact).
CREATE INDEX threads_by_role ON threads (tenant, role_id);
