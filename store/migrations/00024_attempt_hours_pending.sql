-- hookd schema, version 24: the hourly chart rollup leaves the attempt-log
-- writer's hot transaction (issues 15 and 33).
--
-- Until now every batch upserted its rows of webhooks.attempt_hours (one per
-- account, endpoint and hour it touched: with 1000 endpoints nearly one per
-- delivery, 0.39 rows and ~25 µs of Postgres CPU per delivery) inside the
-- transaction that appends the attempts, holding their row locks to its end.
-- Now a batch inserts ONE row here, in that same transaction: its deltas (per
-- account, endpoint, hour and latency bucket, the fresh attempts' delivered
-- and failed counts). Committed with the attempts, they are never lost nor
-- counted twice, whatever crashes. Every few seconds a writer folds the rows
-- here into webhooks.attempt_hours in a short transaction of its own
-- (store.FoldAttemptHours); attempt_hours_all (the rollup plus what is not
-- folded yet) is what the portal reads, so charts are exact at once.

-- +goose Up

CREATE TYPE webhooks.attempt_hour_delta AS (
    account     text,
    endpoint_id text,
    hour        timestamptz,
    bucket      integer,
    delivered   bigint,
    failed      bigint
);

CREATE TABLE webhooks.attempt_hours_pending (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    deltas webhooks.attempt_hour_delta[] NOT NULL
);

-- The rollup with the deltas not folded yet: several rows per key, which
-- readers sum (the histogram of a delta row is its one bucket).
CREATE VIEW webhooks.attempt_hours_all AS
SELECT account, endpoint_id, hour, delivered, failed, latency FROM webhooks.attempt_hours
UNION ALL
SELECT d.account, d.endpoint_id, d.hour, d.delivered, d.failed,
    webhooks.hist_add('{}', d.bucket, d.delivered + d.failed) AS latency
FROM webhooks.attempt_hours_pending p, unnest(p.deltas) d;

-- +goose Down

-- What is not folded yet is folded now, so the rollup stays whole.
INSERT INTO webhooks.attempt_hours AS h (account, endpoint_id, hour, delivered, failed, latency)
SELECT d.account, d.endpoint_id, d.hour, sum(d.delivered), sum(d.failed), webhooks.hist(d.bucket, d.delivered + d.failed)
FROM webhooks.attempt_hours_pending p, unnest(p.deltas) d
GROUP BY 1, 2, 3
ON CONFLICT (account, endpoint_id, hour) DO UPDATE SET
    delivered = h.delivered + EXCLUDED.delivered,
    failed = h.failed + EXCLUDED.failed,
    latency = webhooks.hist_merge(h.latency, EXCLUDED.latency);

DROP VIEW webhooks.attempt_hours_all;
DROP TABLE webhooks.attempt_hours_pending;
DROP TYPE webhooks.attempt_hour_delta;
