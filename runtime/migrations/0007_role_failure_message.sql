-- What a failed spoken turn says instead of silence (SPEC RT-11): NULL, the default apology in
-- the turn's language; '' nothing (the client still gets the error).
ALTER TABLE roles ADD COLUMN failure_message text CHECK (length(failure_message) <= 200);
