-- A role's recording switch (SPEC REC-1): off unless an admin turns it on; the deployment's
-- OPENREALTIME_RECORDING_TENANTS is the ceiling above it.
ALTER TABLE roles ADD COLUMN recording_enabled boolean NOT NULL DEFAULT false;
