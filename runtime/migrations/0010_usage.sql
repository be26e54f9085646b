-- What each tenant's conversations used, per day (UTC), role and user (SPEC OPS-6;
-- runtime/usage.py): counters only, priced when read.
CREATE TABLE usage_daily (
    tenant        text    NOT NULL,
    day           date    NOT NULL,
    role_id       text    NOT NULL,
    user_id       text    NOT NULL,
    responses     bigint  NOT NULL DEFAULT 0,
    input_tokens  bigint  NOT NULL DEFAULT 0,
    output_tokens bigint  NOT NULL DEFAULT 0,
    audio_in_ms   bigint  NOT NULL DEFAULT 0,
    audio_out_ms  bigint  NOT NULL DEFAULT 0,
    asr_ms        bigint  NOT NULL DEFAULT 0,
    tts_chars     bigint  NOT NULL DEFAULT 0,
    tool_calls    bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, day, role_id, user_id)
);
