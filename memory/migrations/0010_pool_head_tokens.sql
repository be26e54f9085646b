-- A pool's head version becomes a value no transaction ever hands out twice (memory/
-- postgres_pool_store.py rule 5): a writer may then cache the metadata it is about to commit
-- under its new head — if it rolls back, no committed head ever carries that value. The
-- sequence starts past every version written before, so no old value comes back either.

CREATE SEQUENCE role_pool_head_versions AS bigint;

SELECT setval('role_pool_head_versions', COALESCE((SELECT max(version) FROM role_pool_heads), 0) + 1);
