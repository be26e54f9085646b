-- Model time and CPU time per day, role and user (SPEC OPS-6; runtime/usage.py Rules 5-7): the
-- milliseconds a session's turns waited on its models, its share of the process's CPU time, and
-- what a paid stage did without its provider once the budget was spent (not priced).
ALTER TABLE usage_daily ADD COLUMN model_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN cpu_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN unpriced_input_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN unpriced_output_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN unpriced_asr_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_daily ADD COLUMN unpriced_tts_chars bigint NOT NULL DEFAULT 0;
