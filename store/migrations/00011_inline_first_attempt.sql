-- hookd schema, version 11: a delivery row holds its first logged attempt
-- (issue 15). Most deliveries succeed at their first attempt; writing that
-- attempt into the delivery row, which is written anyway, makes a delivered
-- webhook cost one row instead of two. Later attempts (retries, replays) are
-- appended to the attempt log as before.
--
-- The attempt log keeps its name for readers: webhooks.attempts is now a
-- view, the union of the partitioned table (renamed webhooks.attempt_rows)
-- and the attempts held by delivery rows. Inserting into the view inserts
-- into the table. An attempt held by a delivery row drops out of the view
-- once the partition of its day would have been dropped
-- (webhooks.attempt_horizon, moved on by MaintainAttemptPartitions), so the
-- log answers the same as when every attempt had its own row.

-- +goose Up

ALTER TABLE webhooks.attempts RENAME TO attempt_rows;

ALTER TABLE webhooks.deliveries
    ADD COLUMN a_id               text,
    ADD COLUMN a_attempt          integer,
    ADD COLUMN a_tier             text,
    ADD COLUMN a_started_at       timestamptz,
    ADD COLUMN a_duration_ms      integer,
    ADD COLUMN a_status_code      integer,
    ADD COLUMN a_outcome          text,
    ADD COLUMN a_error_class      text,
    ADD COLUMN a_error            text,
    ADD COLUMN a_response_excerpt text,
    ADD COLUMN a_next_action      text,
    ADD COLUMN a_replay_id        text,
    ADD COLUMN a_destination      text,
    ADD COLUMN a_body_sha256      text CHECK (a_body_sha256 IS NULL OR length(a_body_sha256) = 64),
    ADD CONSTRAINT deliveries_inline_attempt_whole CHECK ((a_id IS NULL) = (a_started_at IS NULL));

-- What the attempt log's own indexes serve, for the held attempts: an
-- endpoint's attempts over a window, its dead letters, all dead letters.
CREATE INDEX deliveries_a_endpoint_started_idx ON webhooks.deliveries (endpoint_id, a_started_at) WHERE a_id IS NOT NULL;
CREATE INDEX deliveries_a_dead_letter_started_idx ON webhooks.deliveries (a_started_at) WHERE a_next_action = 'dead_letter';

-- The start of the oldest day the attempt log still keeps.
CREATE TABLE webhooks.attempt_horizon (
    one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
    horizon timestamptz NOT NULL
);
INSERT INTO webhooks.attempt_horizon (horizon) VALUES ('-infinity');

CREATE VIEW webhooks.attempts AS
SELECT attempt_id, delivery_id, event_id, endpoint_id, attempt, tier, started_at, duration_ms, status_code, outcome,
    error_class, error, response_excerpt, next_action, replay_id, account, destination, body_sha256
FROM webhooks.attempt_rows
UNION ALL
SELECT d.a_id, d.id, d.event_id, d.endpoint_id, d.a_attempt, d.a_tier, d.a_started_at, d.a_duration_ms, d.a_status_code,
    d.a_outcome, d.a_error_class, d.a_error, d.a_response_excerpt, d.a_next_action, d.a_replay_id, d.account,
    d.a_destination, d.a_body_sha256
FROM webhooks.deliveries d
WHERE d.a_id IS NOT NULL AND d.a_started_at >= (SELECT h.horizon FROM webhooks.attempt_horizon h);

-- +goose StatementBegin
CREATE FUNCTION webhooks.insert_attempt() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhooks.attempt_rows (attempt_id, delivery_id, event_id, endpoint_id, attempt, tier, started_at,
        duration_ms, status_code, outcome, error_class, error, response_excerpt, next_action, replay_id, account,
        destination, body_sha256)
    VALUES (NEW.attempt_id, NEW.delivery_id, NEW.event_id, NEW.endpoint_id, NEW.attempt, NEW.tier, NEW.started_at,
        NEW.duration_ms, NEW.status_code, NEW.outcome, NEW.error_class, NEW.error, NEW.response_excerpt,
        NEW.next_action, NEW.replay_id, NEW.account, NEW.destination, NEW.body_sha256);
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER attempts_insert
    INSTEAD OF INSERT ON webhooks.attempts
    FOR EACH ROW EXECUTE FUNCTION webhooks.insert_attempt();

-- +goose Down

-- Held attempts move back to rows of their own.
INSERT INTO webhooks.attempt_rows (attempt_id, delivery_id, event_id, endpoint_id, attempt, tier, started_at,
    duration_ms, status_code, outcome, error_class, error, response_excerpt, next_action, replay_id, account,
    destination, body_sha256)
SELECT d.a_id, d.id, d.event_id, d.endpoint_id, d.a_attempt, d.a_tier, d.a_started_at, d.a_duration_ms, d.a_status_code,
    d.a_outcome, d.a_error_class, d.a_error, d.a_response_excerpt, d.a_next_action, d.a_replay_id, d.account,
    d.a_destination, d.a_body_sha256
FROM webhooks.deliveries d
WHERE d.a_id IS NOT NULL AND d.a_started_at >= (SELECT h.horizon FROM webhooks.attempt_horizon h)
ON CONFLICT DO NOTHING;
DROP VIEW webhooks.attempts;
DROP FUNCTION webhooks.insert_attempt();
DROP TABLE webhooks.attempt_horizon;
DROP INDEX webhooks.deliveries_a_dead_letter_started_idx;
DROP INDEX webhooks.deliveries_a_endpoint_started_idx;
ALTER TABLE webhooks.deliveries
    DROP CONSTRAINT deliveries_inline_attempt_whole,
    DROP COLUMN a_id, DROP COLUMN a_attempt, DROP COLUMN a_tier, DROP COLUMN a_started_at, DROP COLUMN a_duration_ms,
    DROP COLUMN a_status_code, DROP COLUMN a_outcome, DROP COLUMN a_error_class, DROP COLUMN a_error,
    DROP COLUMN a_response_excerpt, DROP COLUMN a_next_action, DROP COLUMN a_replay_id, DROP COLUMN a_destination,
    DROP COLUMN a_body_sha256;
ALTER TABLE webhooks.attempt_rows RENAME TO attempts;
