-- hookd schema, version 10: the installation's topic layout, written by every
-- hookd daemon at start-up so that hookctl names the topics hookd really uses
-- (its retry tiers in particular) without being told the retry schedule.

-- +goose Up

CREATE TABLE webhooks.installations (
    topic_prefix   text        PRIMARY KEY,
    partitions     integer     NOT NULL CHECK (partitions > 0),
    -- The retry schedule as hookd's --retry-schedule spells it (30s,5m,...).
    retry_schedule text        NOT NULL,
    -- The retry tier topic names, in schedule order.
    tier_topics    text[]      NOT NULL,
    -- The hookd version and command that last wrote the row.
    written_by     text        NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- +goose Down

DROP TABLE webhooks.installations;
