-- Phone calls (SPEC TEL-5): who called which number, when, for how long, how it ended and
-- where it was transferred. The numbers are sealed with the memory keyring (key_id + blob;
-- the call's tenant and id are the AEAD context); logs only ever see tel_<hash>.
CREATE TABLE phone_calls (
    tenant          text        NOT NULL,
    user_id         text        NOT NULL,
    call_id         text        NOT NULL,
    record_id       text        NOT NULL,
    provider        text        NOT NULL,
    role_id         text        NOT NULL,
    thread_id       text,
    key_id          text        NOT NULL,
    numbers_sealed  bytea       NOT NULL,
    started_at      timestamptz NOT NULL,
    ended_at        timestamptz,
    ended_by        text,
    PRIMARY KEY (tenant, call_id)
);
CREATE UNIQUE INDEX phone_calls_by_record ON phone_calls (tenant, record_id);
CREATE INDEX phone_calls_by_user ON phone_calls (tenant, user_id, started_at DESC);
