-- A tenant's own retention period for its recordings (SPEC REC-4), set by its admins; a tenant
-- without a row keeps the deployment's (OPENREALTIME_RECORDING_RETENTION_DAYS).
CREATE TABLE recording_policies (
    tenant          text        PRIMARY KEY,
    retention_days  integer     CHECK (retention_days BETWEEN 1 AND 36500),
    updated_at      timestamptz NOT NULL
);
