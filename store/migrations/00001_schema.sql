-- hookd schema, version 1. Everything lives in the "webhooks" schema, which
-- store.Migrate creates before goose runs (goose keeps its own version table
-- there too).

-- +goose Up

-- Endpoints: where deliveries go. Components keep an in-memory index of this
-- table and refresh it on the NOTIFY below, never with a query per event.
CREATE TABLE webhooks.endpoints (
    id                 text        PRIMARY KEY,
    account            text        NOT NULL CHECK (account <> ''),
    url                text        NOT NULL CHECK (url <> ''),
    description        text        NOT NULL DEFAULT '',
    -- Signing secrets, current first; several while a rotation is in progress.
    secrets            text[]      NOT NULL CHECK (cardinality(secrets) >= 1),
    -- Subscribed event types; empty means all. "invoice.*" style wildcards.
    event_types        text[]      NOT NULL DEFAULT '{}',
    status             text        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
    -- Per-endpoint limits; NULL means the dispatcher's default.
    max_in_flight      integer     CHECK (max_in_flight > 0),
    timeout_ms         integer     CHECK (timeout_ms > 0),
    rate_per_sec       double precision CHECK (rate_per_sec > 0),
    failing_since      timestamptz,
    disabled_reason    text,
    disabled_at        timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX endpoints_account_idx ON webhooks.endpoints (account);

-- +goose StatementBegin
CREATE FUNCTION webhooks.notify_endpoint_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookd_endpoints', COALESCE(NEW.id, OLD.id));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER endpoints_notify
    AFTER INSERT OR UPDATE OR DELETE ON webhooks.endpoints
    FOR EACH ROW EXECUTE FUNCTION webhooks.notify_endpoint_change();

-- Outbox: applications insert here in the same transaction as their business
-- change. The CDC relay reads committed inserts from the WAL (publication
-- limited to INSERT), so rows may be pruned at any time after commit without
-- losing an event; the relay prunes them after publishing.
CREATE TABLE webhooks.outbox (
    id          text        PRIMARY KEY DEFAULT gen_random_uuid()::text CHECK (id <> '' AND length(id) <= 255),
    account     text        NOT NULL CHECK (account <> ''),
    type        text        NOT NULL CHECK (type <> ''),
    payload     jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_created_at_idx ON webhooks.outbox (created_at);

-- Delivery state: one row per (event, endpoint).
CREATE TABLE webhooks.deliveries (
    id               text        PRIMARY KEY,
    event_id         text        NOT NULL,
    endpoint_id      text        NOT NULL,
    account          text        NOT NULL,
    event_type       text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'retrying', 'delivered', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status_code integer,
    last_error       text,
    next_due_at      timestamptz,
    dead_reason      text,
    dlq_topic        text,
    dlq_partition    integer,
    dlq_offset       bigint,
    event_created_at timestamptz NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz
);
CREATE INDEX deliveries_endpoint_idx ON webhooks.deliveries (endpoint_id, created_at DESC);
CREATE INDEX deliveries_event_idx ON webhooks.deliveries (event_id);
CREATE INDEX deliveries_open_idx ON webhooks.deliveries (updated_at) WHERE status IN ('pending', 'retrying');

-- Attempt log: append-only, one row per HTTP attempt (or decision taken
-- instead of one), partitioned by day on started_at. attempt_id makes a
-- re-written record idempotent. store.MaintainAttemptPartitions creates
-- partitions ahead and drops the ones older than the retention.
CREATE TABLE webhooks.attempts (
    attempt_id       text        NOT NULL,
    delivery_id      text        NOT NULL,
    event_id         text        NOT NULL,
    endpoint_id      text        NOT NULL,
    attempt          integer     NOT NULL,
    tier             text        NOT NULL,
    started_at       timestamptz NOT NULL,
    duration_ms      integer     NOT NULL,
    status_code      integer,
    outcome          text        NOT NULL,
    error_class      text,
    error            text,
    response_excerpt text,
    next_action      text        NOT NULL,
    replay_id        text,
    PRIMARY KEY (attempt_id, started_at)
) PARTITION BY RANGE (started_at);
CREATE INDEX attempts_delivery_idx ON webhooks.attempts (delivery_id, started_at);
-- Safety net for rows outside every daily partition (clock skew, late
-- records); maintenance keeps daily partitions ahead so it stays empty.
CREATE TABLE webhooks.attempts_default PARTITION OF webhooks.attempts DEFAULT;

-- Replay audit: one row per replay request.
CREATE TABLE webhooks.replays (
    id          text        PRIMARY KEY,
    actor       text        NOT NULL,
    reason      text        NOT NULL,
    filter      jsonb       NOT NULL DEFAULT '{}',
    dry_run     boolean     NOT NULL DEFAULT false,
    matched     integer     NOT NULL DEFAULT 0,
    replayed    integer     NOT NULL DEFAULT 0,
    status      text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done', 'interrupted', 'failed')),
    progress    jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);

-- +goose Down
DROP TABLE webhooks.replays;
DROP TABLE webhooks.attempts;
DROP TABLE webhooks.deliveries;
DROP TABLE webhooks.outbox;
DROP TABLE webhooks.endpoints;
DROP FUNCTION webhooks.notify_endpoint_change();
