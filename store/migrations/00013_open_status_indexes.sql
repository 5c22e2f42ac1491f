-- hookd schema, version 13: the status indexes of webhooks.deliveries leave
-- out delivered rows (issue 15: Postgres CPU per delivery). Nearly every
-- row is delivered, and every insert paid for seven index entries, about
-- 3.4 µs of Postgres CPU each; a delivered row now costs five. A listing
-- filtered on 'delivered' reads the created_at indexes of the endpoint or
-- the account (most rows match, so few are skipped); a listing filtered on
-- any other state (pending, retrying, dead: the few) reads these, and the
-- queries say status <> 'delivered' so that the planner may.
--
-- Built CONCURRENTLY (no transaction), so upgrading a large installation
-- never blocks the attempt-log writer; each step can run again after an
-- interruption (a half-built index is dropped and built again).

-- +goose NO TRANSACTION
-- +goose Up

DROP INDEX CONCURRENTLY IF EXISTS webhooks.deliveries_endpoint_open_status_idx;
CREATE INDEX CONCURRENTLY deliveries_endpoint_open_status_idx ON webhooks.deliveries (endpoint_id, status, created_at DESC)
    WHERE status <> 'delivered';
DROP INDEX CONCURRENTLY IF EXISTS webhooks.deliveries_endpoint_status_idx;

DROP INDEX CONCURRENTLY IF EXISTS webhooks.deliveries_account_open_status_idx;
CREATE INDEX CONCURRENTLY deliveries_account_open_status_idx ON webhooks.deliveries (account, status, created_at DESC, id DESC)
    WHERE status <> 'delivered';
DROP INDEX CONCURRENTLY IF EXISTS webhooks.deliveries_account_status_idx;

-- +goose Down

CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_endpoint_status_idx ON webhooks.deliveries (endpoint_id, status, created_at DESC);
CREATE INDEX CONCURRENTLY IF NOT EXISTS deliveries_account_status_idx ON webhooks.deliveries (account, status, created_at DESC, id DESC);
DROP INDEX CONCURRENTLY IF EXISTS webhooks.deliveries_endpoint_open_status_idx;
DROP INDEX CONCURRENTLY IF EXISTS webhooks.deliveries_account_open_status_idx;
