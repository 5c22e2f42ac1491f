-- hookd schema, version 2: the outbox relay's bookkeeping.

-- +goose Up

-- One row per replication slot the relay created and finished back-filling:
-- when the relay creates its slot it first publishes the outbox rows that
-- were committed before the slot existed (read from the slot's exported
-- snapshot), then records the slot here. A slot without a row here was
-- interrupted during that back-fill; the relay drops and re-creates it.
CREATE TABLE webhooks.relay_slots (
    slot_name       text        PRIMARY KEY,
    backfilled_rows bigint      NOT NULL DEFAULT 0,
    backfilled_at   timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE webhooks.relay_slots;
