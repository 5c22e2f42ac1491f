-- +goose Up
-- Outbox rows inserted without an id get the same shape of id as events
-- produced to the ingress topic without one: "evt_" and 32 hex digits
-- (36 characters, as long as the UUIDs given before).
ALTER TABLE webhooks.outbox ALTER COLUMN id SET DEFAULT 'evt_' || replace(gen_random_uuid()::text, '-', '');

-- +goose Down
ALTER TABLE webhooks.outbox ALTER COLUMN id SET DEFAULT gen_random_uuid()::text;
