-- Recordings (SPEC REC-2): what is known of each session's recording. The audio itself rests
-- sealed in an audio store (records/audio_store.py: the data directory, or object storage).
CREATE TABLE recordings (
    tenant        text        NOT NULL,
    recording_id  text        NOT NULL,
    user_id       text        NOT NULL,
    session_id    text        NOT NULL,
    thread_id     text        NOT NULL,
    role_id       text        NOT NULL,
    store         text        NOT NULL,
    key_id        text        NOT NULL,
    started_at    timestamptz NOT NULL,
    ended_at      timestamptz,
    duration_ms   bigint      NOT NULL DEFAULT 0,
    size_bytes    bigint      NOT NULL DEFAULT 0,
    retain_until  timestamptz,
    protected     boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, recording_id)
);
CREATE INDEX recordings_by_thread ON recordings (tenant, thread_id, started_at);
CREATE INDEX recordings_expiring ON recordings (retain_until) WHERE retain_until IS NOT NULL;
