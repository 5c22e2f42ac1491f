-- hookd schema, version 9: owner alerts (the hookd.* operational events an
-- account's endpoints can subscribe to) and delivery evidence (where each
-- attempt was sent and the SHA-256 of the bytes sent).

-- +goose Up

-- Evidence: the endpoint URL at the time of the attempt and the hex SHA-256
-- of the exact request body. NULL for attempts that sent nothing (skipped,
-- deferred) and for rows written before version 9.
ALTER TABLE webhooks.attempts ADD COLUMN destination text;
ALTER TABLE webhooks.attempts ADD COLUMN body_sha256 text CHECK (body_sha256 IS NULL OR length(body_sha256) = 64);

-- What the hourly dead-letter aggregation reads (the dead letters by time)
-- and the portal's banners (an endpoint's dead letters of the last day).
-- Partial: dead letters are a small share of the attempts.
CREATE INDEX attempts_dead_letter_started_idx ON webhooks.attempts (started_at) WHERE next_action = 'dead_letter';
CREATE INDEX attempts_dead_letter_endpoint_idx ON webhooks.attempts (endpoint_id, started_at) WHERE next_action = 'dead_letter';

-- The failing episode (its failing_since) whose hookd.endpoint.failing event
-- has been produced; cleared once hookd.endpoint.recovered is produced. Kept
-- in endpoint_health so that it does not rewrite (and NOTIFY about) the
-- endpoint row.
ALTER TABLE webhooks.endpoint_health ADD COLUMN warned_failing_since timestamptz;

-- One hookd.delivery.dead_lettered event per endpoint per hour: computed
-- once when the hour is swept, produced at least once (notified_at NULL
-- means still owed).
CREATE TABLE webhooks.dead_letter_alerts (
    endpoint_id  text        NOT NULL,
    hour         timestamptz NOT NULL,
    account      text        NOT NULL,
    count        integer     NOT NULL CHECK (count > 0),
    sample_event_ids text[]  NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    notified_at  timestamptz,
    PRIMARY KEY (endpoint_id, hour)
);
CREATE INDEX dead_letter_alerts_owed_idx ON webhooks.dead_letter_alerts (hour) WHERE notified_at IS NULL;

-- The last hour the dead-letter aggregation swept (one row).
CREATE TABLE webhooks.dead_letter_alert_sweeps (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    swept_hour timestamptz NOT NULL
);

-- +goose Down
DROP TABLE webhooks.dead_letter_alert_sweeps;
DROP TABLE webhooks.dead_letter_alerts;
ALTER TABLE webhooks.endpoint_health DROP COLUMN warned_failing_since;
DROP INDEX webhooks.attempts_dead_letter_endpoint_idx;
DROP INDEX webhooks.attempts_dead_letter_started_idx;
ALTER TABLE webhooks.attempts DROP COLUMN body_sha256;
ALTER TABLE webhooks.attempts DROP COLUMN destination;
