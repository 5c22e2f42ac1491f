-- hookd schema, version 23: ordered delivery per endpoint (issue 31).
-- 'fifo': the dispatcher sends the endpoint's deliveries one at a time, in
-- the order they sit in its partition of webhooks.deliveries, retrying a
-- failure in place (docs/api.md, Ordered delivery). 'none' (the default,
-- and every existing endpoint's): concurrent, retries through the tiers.
-- (00022 is the traceparent migration.)

-- +goose Up

ALTER TABLE webhooks.endpoints
    ADD COLUMN ordering text NOT NULL DEFAULT 'none'
        CHECK (ordering IN ('none', 'fifo'));

COMMENT ON COLUMN webhooks.endpoints.ordering IS
    'none (concurrent, retries through the tiers) or fifo (one at a time, in partition order, retried in place).';

-- +goose Down

ALTER TABLE webhooks.endpoints DROP COLUMN ordering;
