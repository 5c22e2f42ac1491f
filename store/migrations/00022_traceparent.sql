-- hookd schema, version 22: OpenTelemetry trace context (issue 31).
-- webhooks.outbox.traceparent is an application's W3C traceparent
-- ("00-<trace id>-<span id>-<flags>"), optional: with tracing on, the
-- relay continues that trace (an empty or malformed value starts a new
-- one, never refuses the row; the CHECK only bounds its size).
-- webhooks.endpoints.send_traceparent opts an endpoint in to receive the
-- traceparent header of its attempt's span on every request.

-- +goose Up

ALTER TABLE webhooks.outbox
    ADD COLUMN traceparent text CHECK (length(traceparent) <= 256);

COMMENT ON COLUMN webhooks.outbox.traceparent IS
    'Optional W3C traceparent of the application span that wrote the event; the relay continues its trace when tracing is on.';

ALTER TABLE webhooks.endpoints
    ADD COLUMN send_traceparent boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN webhooks.endpoints.send_traceparent IS
    'Send the W3C traceparent header of the attempt span with every request (when tracing is on).';

-- +goose Down

ALTER TABLE webhooks.endpoints DROP COLUMN send_traceparent;
ALTER TABLE webhooks.outbox DROP COLUMN traceparent;
