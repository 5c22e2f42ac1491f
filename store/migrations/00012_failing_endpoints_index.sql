-- hookd schema, version 12: an index of the failing endpoints. The
-- attempt-log writer moves failing_since and disables endpoints only for
-- the endpoints of a batch that failed or were failing already; with the
-- failing few indexed, a batch of healthy deliveries no longer joins every
-- endpoint it names against webhooks.endpoints (issue 15). The periodic
-- disable sweep reads the same index.

-- +goose Up

CREATE INDEX endpoints_failing_idx ON webhooks.endpoints (failing_since) WHERE failing_since IS NOT NULL;

-- +goose Down

DROP INDEX webhooks.endpoints_failing_idx;
