-- hookd schema, version 3: what the attempt-log writer needs to keep the
-- delivery state row and endpoint health correct when attempt records arrive
-- late, twice or out of order (they come from many Kafka partitions).

-- +goose Up

-- The start time of the attempt the delivery row reflects: an older attempt
-- arriving late never overwrites the state a newer one set.
ALTER TABLE webhooks.deliveries ADD COLUMN last_attempt_at timestamptz;

-- What reconciliation scans: pending rows by age, retrying rows by due time.
CREATE INDEX deliveries_pending_created_idx ON webhooks.deliveries (created_at) WHERE status = 'pending';
CREATE INDEX deliveries_retrying_due_idx ON webhooks.deliveries (next_due_at) WHERE status = 'retrying';

-- Set once the endpoint.disabled operational event of the current
-- disablement has been produced; NULL with status 'disabled' means the event
-- is still owed (it is produced at least once, after the disabling commit).
ALTER TABLE webhooks.endpoints ADD COLUMN disabled_notified_at timestamptz;
UPDATE webhooks.endpoints SET disabled_notified_at = now() WHERE status = 'disabled';
CREATE INDEX endpoints_disabled_unnotified_idx ON webhooks.endpoints (disabled_at)
    WHERE status = 'disabled' AND disabled_notified_at IS NULL;

-- Health bookkeeping kept out of webhooks.endpoints so that recording every
-- success does not rewrite (and NOTIFY about) the endpoint row. Only
-- failing_since, which changes on transitions, lives on the endpoint.
CREATE TABLE webhooks.endpoint_health (
    endpoint_id      text        PRIMARY KEY,
    -- Start time of the newest successful attempt seen.
    last_success_at  timestamptz,
    -- Start time of the newest failed attempt seen.
    last_failure_at  timestamptz,
    -- When the endpoint was last re-enabled: failures started before it do
    -- not count towards failing_since any more.
    reset_at         timestamptz
);

-- Re-enabling an endpoint (status disabled -> active, by whatever tool)
-- clears its failure state and starts its health afresh.
-- +goose StatementBegin
CREATE FUNCTION webhooks.reset_endpoint_health() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'disabled' AND NEW.status = 'active' THEN
        NEW.failing_since := NULL;
        NEW.disabled_reason := NULL;
        NEW.disabled_at := NULL;
        NEW.disabled_notified_at := NULL;
        INSERT INTO webhooks.endpoint_health (endpoint_id, reset_at) VALUES (NEW.id, now())
        ON CONFLICT (endpoint_id) DO UPDATE SET reset_at = now();
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER endpoints_reset_health
    BEFORE UPDATE OF status ON webhooks.endpoints
    FOR EACH ROW EXECUTE FUNCTION webhooks.reset_endpoint_health();

-- +goose Down
DROP TRIGGER endpoints_reset_health ON webhooks.endpoints;
DROP FUNCTION webhooks.reset_endpoint_health();
DROP TABLE webhooks.endpoint_health;
DROP INDEX webhooks.endpoints_disabled_unnotified_idx;
ALTER TABLE webhooks.endpoints DROP COLUMN disabled_notified_at;
DROP INDEX webhooks.deliveries_retrying_due_idx;
DROP INDEX webhooks.deliveries_pending_created_idx;
ALTER TABLE webhooks.deliveries DROP COLUMN last_attempt_at;
