-- A private tool's call and result are kept without their text (pipeline/tool_record.py
-- Rule 4): the tool keeps them itself, sealed. Journals written before that rule hold the
-- confide tool's confessions and the confessor's answers in plaintext; this takes them out
-- (the sealed copies in role_memory_confessions stay; learning reads them from there).
-- The fingerprint column is the digest of the payload as first appended: a digest, no text.

UPDATE journal_events
   SET payload = (payload - 'arguments') || '{"arguments": {}, "private": true}'::jsonb
 WHERE kind = 'tool_call'
   AND payload->>'name' = 'confide'
   AND payload->'private' IS NULL;

UPDATE journal_events
   SET payload = (payload - 'content') || '{"content": "", "private": true}'::jsonb
 WHERE kind = 'tool_result'
   AND payload->>'name' = 'confide'
   AND payload->'private' IS NULL;
