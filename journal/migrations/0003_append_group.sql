-- Group commit for journal appends (SPEC J-2): many appends, to many threads, in one statement
-- and one transaction. How the store forms groups is in journal/postgres_store.py.

-- Append a group of batches. p_tenants/p_user_ids/p_thread_ids list the group's threads, each
-- once. The other arrays run per event, in group order: p_threads[i] is the (1-based) position
-- of event i's thread in those, p_appends[i] numbers the batch (caller's append) it belongs
-- to. The caller passes each event id once per thread per group (a batch whose ids overlap
-- an earlier batch of the same thread waits for a later group), so every event is looked up
-- against the rows stored before this group only.
--
-- Returns one row per event, in order: its seq and created_at (stored before or now);
-- o_conflict when the id is already stored with another fingerprint; o_busy when its thread's
-- head row was locked by another transaction. A batch with a conflict is refused whole — none
-- of its events is written or takes a seq — and a busy thread's batches are not looked at (the
-- caller appends them on their own, waiting for the lock), while the other batches of the
-- group go on: nothing one batch does is raised to the others. Within a thread, batches take
-- contiguous seqs in group order, so one batch stays contiguous and seqs stay gap-free.
--
-- Locking: head rows are locked FOR NO KEY UPDATE (conflicts with journal_append's FOR UPDATE
-- and delete_thread's DELETE, not with checkpoint inserts' key-share lock) with SKIP LOCKED, so
-- a group never waits behind one thread's lock holder, and never in a cycle. Missing head rows
-- are created (in key order). The events are looked up and written by the statement after
-- that, whose snapshot sees every append that held a lock before us.
CREATE FUNCTION journal_append_group(
    p_tenants text[],
    p_user_ids text[],
    p_thread_ids text[],
    p_threads integer[],
    p_appends integer[],
    p_event_ids text[],
    p_kinds text[],
    p_payloads jsonb[],
    p_fingerprints text[],
    p_voice_session_ids text[]
) RETURNS TABLE (
    o_append integer,
    o_event_id text,
    o_seq bigint,
    o_created_at timestamptz,
    o_conflict boolean,
    o_busy boolean
)
LANGUAGE plpgsql VOLATILE
-- Every query below is index lookups whatever the arguments (see journal_append).
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_tenants text[];
    v_user_ids text[];
    v_thread_ids text[];
BEGIN
    SELECT coalesce(array_agg(h.tenant), '{}'), coalesce(array_agg(h.user_id), '{}'),
           coalesce(array_agg(h.thread_id), '{}')
      INTO v_tenants, v_user_ids, v_thread_ids
      FROM (SELECT h.tenant, h.user_id, h.thread_id
              FROM journal_threads h
             WHERE (h.tenant, h.user_id, h.thread_id) IN (
                   SELECT t.tenant, t.user_id, t.thread_id
                     FROM unnest(p_tenants, p_user_ids, p_thread_ids)
                          AS t(tenant, user_id, thread_id))
               FOR NO KEY UPDATE OF h SKIP LOCKED
           ) h;

    -- Threads neither locked nor busy have no head row yet: create it (a new row is ours).
    IF cardinality(v_tenants) < cardinality(p_tenants) THEN
    WITH made AS (
        INSERT INTO journal_threads (tenant, user_id, thread_id)
        SELECT t.tenant, t.user_id, t.thread_id
          FROM unnest(p_tenants, p_user_ids, p_thread_ids) AS t(tenant, user_id, thread_id)
         -- Not a row we see (locked by us or another, or being deleted: the insert would wait
         -- for that deleter); only an insert in flight elsewhere makes this one wait.
         WHERE NOT EXISTS (
               SELECT 1
                 FROM journal_threads h
                WHERE h.tenant = t.tenant AND h.user_id = t.user_id
                  AND h.thread_id = t.thread_id)
         ORDER BY 1, 2, 3
        ON CONFLICT (tenant, user_id, thread_id) DO NOTHING
        RETURNING tenant, user_id, thread_id
    )
    SELECT v_tenants || coalesce(array_agg(m.tenant), '{}'),
           v_user_ids || coalesce(array_agg(m.user_id), '{}'),
           v_thread_ids || coalesce(array_agg(m.thread_id), '{}')
      INTO v_tenants, v_user_ids, v_thread_ids
      FROM made m;
    END IF;

    RETURN QUERY
    WITH mine AS (
        SELECT k.tenant, k.user_id, k.thread_id
          FROM unnest(v_tenants, v_user_ids, v_thread_ids) AS k(tenant, user_id, thread_id)
    ), batch AS (
        SELECT e.append_no, t.tenant, t.user_id, t.thread_id, e.event_id, e.kind, e.payload,
               e.fingerprint, e.voice_session_id, e.ord,
               EXISTS (SELECT 1 FROM mine m
                        WHERE m.tenant = t.tenant AND m.user_id = t.user_id
                          AND m.thread_id = t.thread_id) AS ours
          FROM unnest(p_threads, p_appends, p_event_ids, p_kinds, p_payloads, p_fingerprints,
                      p_voice_session_ids)
               WITH ORDINALITY AS e(thread_no, append_no, event_id, kind, payload, fingerprint,
                                    voice_session_id, ord)
          JOIN unnest(p_tenants, p_user_ids, p_thread_ids)
               WITH ORDINALITY AS t(tenant, user_id, thread_id, thread_no)
            ON t.thread_no = e.thread_no
    ), looked AS (
        SELECT b.*, e.seq AS stored_seq, e.created_at AS stored_created_at,
               coalesce(e.fingerprint <> b.fingerprint, false) AS conflict
          FROM batch b
          LEFT JOIN LATERAL (
              SELECT x.seq, x.fingerprint, x.created_at
                FROM journal_events x
               WHERE b.ours AND x.tenant = b.tenant AND x.user_id = b.user_id
                 AND x.thread_id = b.thread_id AND x.event_id = b.event_id
               LIMIT 1
          ) e ON true
    ), refused AS (
        SELECT DISTINCT l.append_no FROM looked l WHERE l.conflict
    ), fresh AS (
        SELECT l.ord, l.tenant, l.user_id, l.thread_id, l.event_id, l.kind, l.payload,
               l.fingerprint, l.voice_session_id,
               h.head_seq + row_number() OVER (
                   PARTITION BY l.tenant, l.user_id, l.thread_id ORDER BY l.ord) AS seq
          FROM looked l
          JOIN journal_threads h
            ON h.tenant = l.tenant AND h.user_id = l.user_id AND h.thread_id = l.thread_id
         WHERE l.ours AND l.stored_seq IS NULL
           AND NOT EXISTS (SELECT 1 FROM refused r WHERE r.append_no = l.append_no)
    ), inserted AS (
        INSERT INTO journal_events
            (tenant, user_id, thread_id, seq, event_id, kind, payload, fingerprint,
             voice_session_id)
        SELECT f.tenant, f.user_id, f.thread_id, f.seq, f.event_id, f.kind, f.payload,
               f.fingerprint, f.voice_session_id
          FROM fresh f
    ), heads AS (
        UPDATE journal_threads h SET head_seq = n.last_seq
          FROM (SELECT f.tenant, f.user_id, f.thread_id, max(f.seq) AS last_seq
                  FROM fresh f
                 GROUP BY f.tenant, f.user_id, f.thread_id) n
         WHERE h.tenant = n.tenant AND h.user_id = n.user_id AND h.thread_id = n.thread_id
    )
    SELECT l.append_no, l.event_id, coalesce(l.stored_seq, f.seq),
           coalesce(l.stored_created_at, now()), l.conflict, NOT l.ours
      FROM looked l
      LEFT JOIN fresh f ON f.ord = l.ord
     ORDER BY l.ord;
END
$$;
