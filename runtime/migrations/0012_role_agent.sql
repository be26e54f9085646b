-- A role's own chat agent (SPEC BRAIN-6): the URL its turns are sent to, and the name of the
-- tenant's tool secret sent as its bearer token (the value stays sealed in tool_secrets).
ALTER TABLE roles ADD COLUMN agent_url text;
ALTER TABLE roles ADD COLUMN agent_secret text;
