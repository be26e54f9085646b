-- A recording's timeline (records/timeline.py: what was said when, for playback beside the
-- audio), sealed with the keyring like the audio: the key's id and the sealed bytes.
ALTER TABLE recordings ADD COLUMN timeline_key_id text;
ALTER TABLE recordings ADD COLUMN timeline bytea;
