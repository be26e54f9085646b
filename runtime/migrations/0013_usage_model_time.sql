-- Model time and CPU time per day, role and user (SPEC OPS-6; runtime/usage.py Rules 5, 6): the
-- milliseconds a session's turns waited on its models, and its share of the process's CPU time.
ALTER TABLE usage_daily ADD COLUMN model_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN cpu_ms bigint NOT NULL DEFAULT 0;
