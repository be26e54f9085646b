-- Resume across processes and a lost answer (SPEC RES-1, RES-4).
-- previous_hash: the token just rotated out stays redeemable (for the same new token, derived
--   with resume_secret) until the new one is used once, so a client whose `session.resumed` was
--   lost is not locked out.
-- epoch: bumped when a resume continues the session from the journal on another process; a
--   process whose live session has a lower epoch fences it (NOTIFY openrealtime_session_fence).
-- options: the session's audio/turn settings, so another process can serve it the same way.
ALTER TABLE voice_sessions
    ADD COLUMN previous_hash text,
    ADD COLUMN epoch         integer NOT NULL DEFAULT 0,
    ADD COLUMN options       jsonb   NOT NULL DEFAULT '{}'::jsonb;

-- One key shared by every process on this database: rotated token = HMAC(key, old token).
CREATE TABLE resume_secret (
    id  boolean PRIMARY KEY DEFAULT true CHECK (id),
    key bytea   NOT NULL
);
