-- A tenant's budget (SPEC OPS-6, seeds/000's micro-USD; runtime/budget.py): when its spend for
-- the day or the month reaches it, paid model work stops. No row, or nulls: no limit.
CREATE TABLE usage_budgets (
    tenant             text        PRIMARY KEY,
    daily_micro_usd    bigint      CHECK (daily_micro_usd >= 0),
    monthly_micro_usd  bigint      CHECK (monthly_micro_usd >= 0),
    updated_at         timestamptz NOT NULL
);
