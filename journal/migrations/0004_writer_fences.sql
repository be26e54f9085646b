-- Writer fences (journal/store.py rule 4): of two copies of a writer (a voice session served
-- by two processes for a moment), only the one holding the writer's current epoch appends.

CREATE TABLE journal_writer_fences (
    tenant     text   NOT NULL,
    user_id    text   NOT NULL,
    thread_id  text   NOT NULL,
    writer     text   NOT NULL,
    epoch      bigint NOT NULL,
    PRIMARY KEY (tenant, user_id, thread_id, writer),
    FOREIGN KEY (tenant, user_id, thread_id)
        REFERENCES journal_threads (tenant, user_id, thread_id) ON DELETE CASCADE
);

-- Lock the thread's head row FOR UPDATE, creating it on first use (as journal_append does).
-- Appends hold that lock until they commit (journal_append FOR UPDATE, journal_append_group
-- FOR NO KEY UPDATE): taking it waits for every append in flight to the thread.
CREATE FUNCTION journal_lock_head(p_tenant text, p_user_id text, p_thread_id text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    LOOP
        PERFORM 1
           FROM journal_threads t
          WHERE t.tenant = p_tenant AND t.user_id = p_user_id AND t.thread_id = p_thread_id
            FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO journal_threads (tenant, user_id, thread_id)
        VALUES (p_tenant, p_user_id, p_thread_id)
        ON CONFLICT (tenant, user_id, thread_id) DO NOTHING;
        EXIT WHEN FOUND;
    END LOOP;
END
$$;

-- Raise a writer's fence (never lower it), under the head lock: when this commits, every
-- append that held the lock before is committed, and every later fenced append of the writer
-- sees the new epoch.
CREATE FUNCTION journal_fence(
    p_tenant text, p_user_id text, p_thread_id text, p_writer text, p_epoch bigint
) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM journal_lock_head(p_tenant, p_user_id, p_thread_id);
    INSERT INTO journal_writer_fences (tenant, user_id, thread_id, writer, epoch)
    VALUES (p_tenant, p_user_id, p_thread_id, p_writer, p_epoch)
    ON CONFLICT (tenant, user_id, thread_id, writer)
        DO UPDATE SET epoch = greatest(journal_writer_fences.epoch, EXCLUDED.epoch);
END
$$;

-- journal_append for a writer at p_epoch: under the head lock, refused (SQLSTATE OR412, nothing
-- written) when the writer's fence is above p_epoch and the batch holds an event not stored
-- yet; a batch stored already (a retry of an append that committed) is returned as stored.
CREATE FUNCTION journal_append_fenced(
    p_tenant text,
    p_user_id text,
    p_thread_id text,
    p_event_ids text[],
    p_kinds text[],
    p_payloads jsonb[],
    p_fingerprints text[],
    p_voice_session_ids text[],
    p_writer text,
    p_epoch bigint
) RETURNS TABLE (o_event_id text, o_seq bigint, o_created_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_fence bigint;
BEGIN
    PERFORM journal_lock_head(p_tenant, p_user_id, p_thread_id);
    SELECT f.epoch INTO v_fence
      FROM journal_writer_fences f
     WHERE f.tenant = p_tenant AND f.user_id = p_user_id AND f.thread_id = p_thread_id
       AND f.writer = p_writer;
    IF v_fence > p_epoch AND EXISTS (
        SELECT 1
          FROM unnest(p_event_ids) AS b(event_id)
         WHERE NOT EXISTS (
               SELECT 1 FROM journal_events x
                WHERE x.tenant = p_tenant AND x.user_id = p_user_id
                  AND x.thread_id = p_thread_id AND x.event_id = b.event_id))
    THEN
        RAISE EXCEPTION 'writer % was fenced past epoch %', p_writer, p_epoch
            USING ERRCODE = 'OR412';
    END IF;
    RETURN QUERY
    SELECT a.o_event_id, a.o_seq, a.o_created_at
      FROM journal_append(p_tenant, p_user_id, p_thread_id, p_event_ids, p_kinds, p_payloads,
                          p_fingerprints, p_voice_session_ids) a;
END
$$;
