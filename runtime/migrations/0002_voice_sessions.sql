-- Voice sessions and their resume tokens (SPEC RES-1, RES-4). A token is stored only as its
-- SHA-256; it is bound to the session and its user, expires, and is replaced on every resume.
CREATE TABLE voice_sessions (
    session_id  text        PRIMARY KEY,
    tenant      text        NOT NULL,
    user_id     text        NOT NULL,
    thread_id   text        NOT NULL,
    role_id     text        NOT NULL,
    token_hash  text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX voice_sessions_by_thread ON voice_sessions (tenant, user_id, thread_id);
