-- The conversation journal (SPEC J-1, J-2). Rules in journal/store.py; how they are kept here
-- in journal/postgres_store.py.

-- One row per thread: the last seq handed out. Appenders lock it, so one thread's appends run
-- one at a time (rule 2) while other threads' appends run in parallel.
CREATE TABLE journal_threads (
    tenant      text        NOT NULL,
    user_id     text        NOT NULL,
    thread_id   text        NOT NULL,
    head_seq    bigint      NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, thread_id)
);

CREATE TABLE journal_events (
    tenant           text        NOT NULL,
    user_id          text        NOT NULL,
    thread_id        text        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq > 0),
    event_id         text        NOT NULL,
    kind             text        NOT NULL,
    payload          jsonb       NOT NULL,
    -- NewEvent.fingerprint() as computed when the event was first appended (rule 3).
    fingerprint      text        NOT NULL,
    voice_session_id text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, user_id, thread_id, seq),
    UNIQUE (tenant, user_id, thread_id, event_id),
    FOREIGN KEY (tenant, user_id, thread_id)
        REFERENCES journal_threads (tenant, user_id, thread_id) ON DELETE CASCADE
);

CREATE INDEX journal_events_voice_session
    ON journal_events (tenant, user_id, thread_id, voice_session_id)
    WHERE voice_session_id IS NOT NULL;

-- Append a batch to one thread in one statement (one round trip, atomic). The caller passes
-- each event id once. Returns (event id, seq, created_at) for every id passed, in order, stored
-- before or now. Raises SQLSTATE OR409 when an id is already stored with another fingerprint;
-- then nothing is written. Every lookup is a point query on the unique (…, event_id) index
-- (LATERAL … LIMIT 1 keeps the planner from scanning the thread when statistics are missing,
-- as on a fresh database), so the cost grows with the batch, not with the thread.
CREATE FUNCTION journal_append(
    p_tenant text,
    p_user_id text,
    p_thread_id text,
    p_event_ids text[],
    p_kinds text[],
    p_payloads jsonb[],
    p_fingerprints text[],
    p_voice_session_ids text[]
) RETURNS TABLE (o_event_id text, o_seq bigint, o_created_at timestamptz)
LANGUAGE plpgsql VOLATILE
-- Every query below is an index lookup whatever the arguments: plan once per connection
-- rather than on every call (planning was about half the cost of a one-event append).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_head bigint;
    v_first_new bigint;
    r record;
    v_seqs bigint[] := '{}';
    v_ids text[] := '{}';
    v_kinds text[] := '{}';
    v_payloads jsonb[] := '{}';
    v_fingerprints text[] := '{}';
    v_sessions text[] := '{}';
BEGIN
    -- Lock the thread's head row, creating it on first use. Each statement below sees rows
    -- committed by appenders that held the lock before us (READ COMMITTED, new snapshot).
    LOOP
        SELECT t.head_seq INTO v_head
          FROM journal_threads t
         WHERE t.tenant = p_tenant AND t.user_id = p_user_id AND t.thread_id = p_thread_id
           FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO journal_threads (tenant, user_id, thread_id)
        VALUES (p_tenant, p_user_id, p_thread_id)
        ON CONFLICT (tenant, user_id, thread_id) DO NOTHING
        RETURNING head_seq INTO v_head;
        EXIT WHEN FOUND;
    END LOOP;
    v_first_new := v_head + 1;

    FOR r IN
        SELECT b.event_id, b.kind, b.payload, b.fingerprint, b.voice_session_id,
               e.seq AS stored_seq, e.fingerprint AS stored_fingerprint,
               e.created_at AS stored_created_at
          FROM unnest(p_event_ids, p_kinds, p_payloads, p_fingerprints, p_voice_session_ids)
               WITH ORDINALITY AS b(event_id, kind, payload, fingerprint, voice_session_id, ord)
          LEFT JOIN LATERAL (
              SELECT x.seq, x.fingerprint, x.created_at
                FROM journal_events x
               WHERE x.tenant = p_tenant AND x.user_id = p_user_id
                 AND x.thread_id = p_thread_id AND x.event_id = b.event_id
               LIMIT 1
          ) e ON true
         ORDER BY b.ord
    LOOP
        o_event_id := r.event_id;
        IF r.stored_seq IS NULL THEN
            v_head := v_head + 1;
            v_seqs := v_seqs || v_head;
            v_ids := v_ids || r.event_id;
            v_kinds := v_kinds || r.kind;
            v_payloads := v_payloads || r.payload;
            v_fingerprints := v_fingerprints || r.fingerprint;
            v_sessions := v_sessions || r.voice_session_id;
            o_seq := v_head;
            o_created_at := now();  -- the column default: the transaction's start
        ELSIF r.stored_fingerprint <> r.fingerprint THEN
            RAISE EXCEPTION 'event % exists with other content', r.event_id
                USING ERRCODE = 'OR409';
        ELSE
            o_seq := r.stored_seq;
            o_created_at := r.stored_created_at;
        END IF;
        RETURN NEXT;
    END LOOP;

    IF v_head >= v_first_new THEN
        INSERT INTO journal_events
            (tenant, user_id, thread_id, seq, event_id, kind, payload, fingerprint,
             voice_session_id)
        SELECT p_tenant, p_user_id, p_thread_id, n.seq, n.event_id, n.kind, n.payload,
               n.fingerprint, n.voice_session_id
          FROM unnest(v_seqs, v_ids, v_kinds, v_payloads, v_fingerprints, v_sessions)
               AS n(seq, event_id, kind, payload, fingerprint, voice_session_id);
        UPDATE journal_threads t SET head_seq = v_head
         WHERE t.tenant = p_tenant AND t.user_id = p_user_id AND t.thread_id = p_thread_id;
    END IF;
END
$$;
