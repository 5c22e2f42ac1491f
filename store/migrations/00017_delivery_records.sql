-- hookd schema, version 17: every delivery's payload, resending any
-- delivery, and what replays sent (issue 32).
--
-- A delivery row keeps the position of its delivery record on the
-- deliveries topic (the record the router, a test event or a resend
-- produced first), written by the attempt-log writer, which reads that
-- topic: the portal and GET /v1/deliveries/{id}/payload read the payload
-- there while the topic's retention has it. Rows written before have none.
--
-- A replay may now also be the resend of one delivery (kind 'delivery',
-- POST /v1/deliveries/{id}/resend, hookctl deliveries resend, the portal).
--
-- webhooks.replay_sends is each replay's own record of what it sent: one
-- row per delivery it produced, written once the broker acknowledged it.
-- A dead letter sent again since it was dead-lettered counts as resolved
-- at once, without waiting for the delivery log to say delivered, and an
-- account's portal lists the operators' replays that sent its deliveries.

-- +goose Up

ALTER TABLE webhooks.deliveries
    ADD COLUMN record_topic     text,
    ADD COLUMN record_partition integer,
    ADD COLUMN record_offset    bigint,
    ADD CONSTRAINT deliveries_record_whole CHECK ((record_topic IS NULL) = (record_offset IS NULL)
        AND (record_topic IS NULL) = (record_partition IS NULL));

ALTER TABLE webhooks.replays DROP CONSTRAINT replays_kind_check;
ALTER TABLE webhooks.replays ADD CONSTRAINT replays_kind_check CHECK (kind IN ('dlq', 'resend', 'delivery'));

CREATE TABLE webhooks.replay_sends (
    -- The account of the delivery sent (its record's hookd-account).
    account      text        NOT NULL,
    delivery_id  text        NOT NULL,
    endpoint_id  text        NOT NULL,
    -- The replay's scope and id: '' for an operator's replay, else the
    -- account whose token asked (webhooks.replays' coalesce(account, '')).
    replay_scope text        NOT NULL,
    replay_id    text        NOT NULL,
    sent_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, delivery_id, replay_scope, replay_id)
);
CREATE INDEX replay_sends_replay_idx ON webhooks.replay_sends (account, replay_scope, replay_id);

-- +goose Down

DROP TABLE webhooks.replay_sends;
DELETE FROM webhooks.replays WHERE kind = 'delivery';
ALTER TABLE webhooks.replays DROP CONSTRAINT replays_kind_check;
ALTER TABLE webhooks.replays ADD CONSTRAINT replays_kind_check CHECK (kind IN ('dlq', 'resend'));
ALTER TABLE webhooks.deliveries
    DROP CONSTRAINT deliveries_record_whole,
    DROP COLUMN record_topic, DROP COLUMN record_partition, DROP COLUMN record_offset;
