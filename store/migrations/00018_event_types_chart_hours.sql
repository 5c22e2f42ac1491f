-- hookd schema, version 18 (issue 32): the event-type catalogue, and an
-- hourly rollup of the attempt log that the portal's charts read.
--
-- Event types: one catalogue per deployment (not per account), read by
-- the API, hookctl and the portal, and by the router, which keeps it in
-- memory (refreshed on the NOTIFY below, like endpoints) to validate an
-- event's data against its type's schema when --validate-event-schemas is
-- on. hookd checks that schema is a valid JSON Schema before every write;
-- the CHECKs only keep the shapes readers rely on.
--
-- attempt_hours: per account, endpoint and hour (UTC), the attempts that
-- made a request: delivered and failed counts and a latency histogram. The attempt-log
-- writer adds a batch's new attempts in the transaction that appends them
-- (store.WriteAttempts); a 30-day chart of an account with a million
-- attempts reads a few thousand rows instead of sorting a million
-- durations (2.1 s). Latency buckets (webhooks.latency_bucket) are exact
-- below 16 ms and 8 per doubling above, so percentiles read from them are
-- within about 4.5% of the exact ones.

-- +goose Up

CREATE TABLE webhooks.event_types (
    name        text        PRIMARY KEY CHECK (name <> '' AND length(name) <= 255),
    description text        NOT NULL DEFAULT '',
    -- A JSON Schema for the event's data; NULL when the type has none.
    schema      jsonb,
    -- An example of the event's data, sent by "send test event".
    example     jsonb,
    deprecated  boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
CREATE FUNCTION webhooks.notify_event_type_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookd_event_types', COALESCE(NEW.name, OLD.name));
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER event_types_notify
    AFTER INSERT OR UPDATE OR DELETE ON webhooks.event_types
    FOR EACH ROW EXECUTE FUNCTION webhooks.notify_event_type_change();

-- The latency bucket of a duration in ms: the ms below 16, then 8 buckets
-- per doubling (bucket b >= 16 starts at 16 * 2^((b-16)/8) ms). Go mirrors
-- it in store.latencyBucketBounds. float8, not numeric: it runs for every
-- attempt written.
-- +goose StatementBegin
CREATE FUNCTION webhooks.latency_bucket(ms integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN ms < 16 THEN greatest(ms, 0) ELSE 16 + floor(8 * ln(ms / 16.0::float8) / ln(2.0::float8))::integer END
$$;
-- +goose StatementEnd

-- A latency histogram is a bigint[] of counts indexed by bucket + 1.
-- +goose StatementBegin
CREATE FUNCTION webhooks.hist_add(h bigint[], bucket integer, n bigint) RETURNS bigint[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    IF h IS NULL THEN
        h := '{}';
    END IF;
    IF cardinality(h) <= bucket THEN
        h := h || array_fill(0::bigint, ARRAY[bucket + 1 - cardinality(h)]);
    END IF;
    h[bucket + 1] := h[bucket + 1] + n;
    RETURN h;
END;
$$;
-- +goose StatementEnd

CREATE AGGREGATE webhooks.hist(integer, bigint) (SFUNC = webhooks.hist_add, STYPE = bigint[]);

-- +goose StatementBegin
CREATE FUNCTION webhooks.hist_merge(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(array_agg(COALESCE(a[i], 0) + COALESCE(b[i], 0) ORDER BY i), '{}')
    FROM generate_series(1, greatest(cardinality(a), cardinality(b))) i
$$;
-- +goose StatementEnd

-- One row per account, endpoint and UTC hour: a 30-day chart of three
-- endpoints reads 2,160 rows.
CREATE TABLE webhooks.attempt_hours (
    account     text        NOT NULL,
    endpoint_id text        NOT NULL,
    hour        timestamptz NOT NULL,
    delivered   bigint      NOT NULL DEFAULT 0,
    failed      bigint      NOT NULL DEFAULT 0,
    -- Attempts that made a request, by latency bucket.
    latency     bigint[]    NOT NULL DEFAULT '{}',
    PRIMARY KEY (account, endpoint_id, hour)
);

-- Backfill from the attempt log (both halves, through the view), with the
-- outcome classes of store's sqlSuccess and sqlFailures at this version.
INSERT INTO webhooks.attempt_hours (account, endpoint_id, hour, delivered, failed, latency)
SELECT account, endpoint_id, hour, sum(delivered), sum(failed), webhooks.hist(bucket, delivered + failed)
FROM (
    SELECT COALESCE(account, '') AS account, endpoint_id, date_trunc('hour', started_at, 'UTC') AS hour,
        webhooks.latency_bucket(duration_ms) AS bucket,
        count(*) FILTER (WHERE outcome = 'delivered') AS delivered,
        count(*) FILTER (WHERE outcome IN ('retry', 'gone', 'permanent', 'refused')) AS failed
    FROM webhooks.attempts
    WHERE outcome IN ('delivered', 'retry', 'gone', 'permanent', 'refused')
    GROUP BY 1, 2, 3, 4
) b
GROUP BY 1, 2, 3;

-- +goose Down

DROP TABLE webhooks.attempt_hours;
DROP FUNCTION webhooks.hist_merge(bigint[], bigint[]);
DROP AGGREGATE webhooks.hist(integer, bigint);
DROP FUNCTION webhooks.hist_add(bigint[], integer, bigint);
DROP FUNCTION webhooks.latency_bucket(integer);
DROP TABLE webhooks.event_types;
DROP FUNCTION webhooks.notify_event_type_change();
