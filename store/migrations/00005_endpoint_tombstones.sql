-- hookd schema, version 5: the tenant boundary. Endpoint ids are never
-- reused, and the attempt log records whose attempt each row is.

-- +goose Up

-- Every endpoint id ever created, with its account. Deleting an endpoint
-- keeps its row here with deleted_at set (its tombstone), in the same
-- transaction as the DELETE. Creating an endpoint claims its id here first,
-- so an id that is live or tombstoned can never be created again, by any
-- account: records still in Kafka for a deleted endpoint (retries, dead
-- letters, replays) can never reach another account's endpoint that took
-- its id. The claim is a primary-key insert, so two concurrent creates, or a
-- create racing a delete, cannot both win whatever the isolation level.
CREATE TABLE webhooks.endpoint_ids (
    id         text        PRIMARY KEY,
    account    text        NOT NULL CHECK (account <> ''),
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);
INSERT INTO webhooks.endpoint_ids (id, account, created_at)
SELECT id, account, created_at FROM webhooks.endpoints;
-- Endpoints deleted before this version left no tombstone. Those that ever
-- had a delivery (so may still have retries or dead letters in Kafka) get
-- one now, under the account of their newest delivery.
INSERT INTO webhooks.endpoint_ids (id, account, created_at, deleted_at)
SELECT DISTINCT ON (d.endpoint_id) d.endpoint_id, d.account, d.created_at, now()
FROM webhooks.deliveries d
WHERE d.account <> '' AND NOT EXISTS (SELECT 1 FROM webhooks.endpoints e WHERE e.id = d.endpoint_id)
ORDER BY d.endpoint_id, d.created_at DESC
ON CONFLICT (id) DO NOTHING;

-- The tombstones alone.
CREATE VIEW webhooks.deleted_endpoints AS
SELECT id, account, deleted_at FROM webhooks.endpoint_ids WHERE deleted_at IS NOT NULL;

-- +goose StatementBegin
CREATE FUNCTION webhooks.claim_endpoint_id() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhooks.endpoint_ids (id, account) VALUES (NEW.id, NEW.account);
    RETURN NEW;
EXCEPTION WHEN unique_violation THEN
    RAISE unique_violation USING
        MESSAGE = format('endpoint id %s is taken: ids of live and deleted endpoints are never reused', NEW.id),
        CONSTRAINT = 'endpoint_ids_pkey';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER endpoints_claim_id
    BEFORE INSERT ON webhooks.endpoints
    FOR EACH ROW EXECUTE FUNCTION webhooks.claim_endpoint_id();

-- +goose StatementBegin
CREATE FUNCTION webhooks.tombstone_endpoint() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhooks.endpoint_ids (id, account, created_at, deleted_at)
    VALUES (OLD.id, OLD.account, OLD.created_at, now())
    ON CONFLICT (id) DO UPDATE SET deleted_at = now();
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER endpoints_tombstone
    AFTER DELETE ON webhooks.endpoints
    FOR EACH ROW EXECUTE FUNCTION webhooks.tombstone_endpoint();

-- TRUNCATE skips row triggers: tombstone the whole table first.
-- +goose StatementBegin
CREATE FUNCTION webhooks.tombstone_all_endpoints() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhooks.endpoint_ids (id, account, created_at, deleted_at)
    SELECT id, account, created_at, now() FROM webhooks.endpoints
    ON CONFLICT (id) DO UPDATE SET deleted_at = now();
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER endpoints_tombstone_truncate
    BEFORE TRUNCATE ON webhooks.endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION webhooks.tombstone_all_endpoints();

-- The id and the account of an endpoint never change (the registry above,
-- and every record in Kafka, name the endpoint by id for its account).
-- +goose StatementBegin
CREATE FUNCTION webhooks.keep_endpoint_identity() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id IS DISTINCT FROM OLD.id OR NEW.account IS DISTINCT FROM OLD.account THEN
        RAISE check_violation USING
            MESSAGE = format('endpoint %s: its id and account cannot change', OLD.id);
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER endpoints_keep_identity
    BEFORE UPDATE OF id, account ON webhooks.endpoints
    FOR EACH ROW EXECUTE FUNCTION webhooks.keep_endpoint_identity();

-- The account of each attempt (the hookd-account of the delivery record it
-- was made for): the attempt timeline of a delivery shows only the
-- attempts of the delivery's own account. NULL on rows written before
-- version 5; those belong to their delivery row's account.
ALTER TABLE webhooks.attempts ADD COLUMN account text;

-- +goose Down
ALTER TABLE webhooks.attempts DROP COLUMN account;
DROP TRIGGER endpoints_keep_identity ON webhooks.endpoints;
DROP FUNCTION webhooks.keep_endpoint_identity();
DROP TRIGGER endpoints_tombstone_truncate ON webhooks.endpoints;
DROP FUNCTION webhooks.tombstone_all_endpoints();
DROP TRIGGER endpoints_tombstone ON webhooks.endpoints;
DROP FUNCTION webhooks.tombstone_endpoint();
DROP TRIGGER endpoints_claim_id ON webhooks.endpoints;
DROP FUNCTION webhooks.claim_endpoint_id();
DROP VIEW webhooks.deleted_endpoints;
DROP TABLE webhooks.endpoint_ids;
