-- hookd schema, version 6: the outbox refuses a payload hookd could never
-- publish, so the application's own transaction gets the error.
--
-- The limit is fixed: octet_length(payload::text) <= 261120 bytes (255 KiB),
-- which is hookd's envelope limit (256 KiB, event.DefaultMaxBytes, the
-- router's and the relay's default --max-envelope-bytes) minus 1 KiB kept
-- for the rest of the envelope (id, account, type, created and the JSON
-- keys). payload::text is what the relay reads from the WAL. The Go helper
-- (producer.Outbox) applies the same limit before it reaches the database
-- (producer.MaxPayloadBytes); the relay still checks every envelope it
-- builds, so a row that bypassed this trigger (inserted before this
-- migration, or with session_replication_role = replica) is dead-lettered
-- with reason "oversize" instead of being published, and never blocks the
-- rows after it. Changing the limit means a new migration replacing the
-- function, together with --max-envelope-bytes.
--
-- A BEFORE INSERT trigger rather than a CHECK constraint: it names the size
-- and the limit in the error, and it leaves rows already in the table alone
-- (no validation scan when migrating). The error is SQLSTATE 23514
-- (check_violation) with constraint name outbox_payload_size, like a CHECK.

-- +goose Up

-- +goose StatementBegin
CREATE FUNCTION webhooks.outbox_check_payload_size() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    size bigint := octet_length(NEW.payload::text);
BEGIN
    IF size > 261120 THEN
        RAISE EXCEPTION 'webhooks.outbox payload is % bytes, the limit is 261120', size
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'outbox_payload_size',
                  DETAIL = format('event id %s, account %s, type %s', NEW.id, left(NEW.account, 100), left(NEW.type, 100)),
                  HINT = 'hookd publishes event envelopes of at most 256 KiB; send a reference to the data instead of the data';
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_payload_size
    BEFORE INSERT ON webhooks.outbox
    FOR EACH ROW EXECUTE FUNCTION webhooks.outbox_check_payload_size();

COMMENT ON TRIGGER outbox_payload_size ON webhooks.outbox IS
    'Refuses a payload whose text form exceeds 261120 bytes (hookd''s 256 KiB envelope limit minus 1 KiB).';

-- +goose Down
DROP TRIGGER outbox_payload_size ON webhooks.outbox;
DROP FUNCTION webhooks.outbox_check_payload_size();
