-- hookd schema, version 4: resumable replays and API tokens.

-- +goose Up

-- A replay request (hookctl dlq replay, hookctl endpoints resend, POST
-- /v1/replays) keeps one row here, its audit record. The id is derived from
-- the request (kind, actor, reason, filter, limit) unless given, so running
-- the same request again finds the same row and resumes from its progress:
-- per dead-letter partition, the next offset to read, written only after
-- the broker acknowledged every record replayed before it (docs/replay.md).
ALTER TABLE webhooks.replays
    ADD COLUMN kind       text        NOT NULL DEFAULT 'dlq' CHECK (kind IN ('dlq', 'resend')),
    -- The account whose token asked for the replay over HTTP; NULL for an
    -- operator (hookctl, admin token). An account sees only its own rows.
    ADD COLUMN account    text,
    -- Matching dead letters not replayed: endpoint deleted, or disabled
    -- without --force.
    ADD COLUMN skipped    bigint      NOT NULL DEFAULT 0,
    ADD COLUMN error      text,
    ADD COLUMN updated_at timestamptz NOT NULL DEFAULT now(),
    ALTER COLUMN matched TYPE bigint,
    ALTER COLUMN replayed TYPE bigint;
CREATE INDEX replays_created_idx ON webhooks.replays (created_at DESC);
CREATE INDEX replays_account_idx ON webhooks.replays (account, created_at DESC) WHERE account IS NOT NULL;

-- Bearer tokens of the HTTP API, one account each. Only the SHA-256 of the
-- token is stored; the token itself is shown once, when created.
CREATE TABLE webhooks.api_tokens (
    id           text        PRIMARY KEY,
    account      text        NOT NULL CHECK (account <> ''),
    token_sha256 bytea       NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    description  text        NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz
);
CREATE INDEX api_tokens_account_idx ON webhooks.api_tokens (account);

-- The delivery log of one endpoint, newest first, by status (hookctl
-- deliveries list --status, GET /v1/endpoints/{id}/deliveries?status=).
CREATE INDEX deliveries_endpoint_status_idx ON webhooks.deliveries (endpoint_id, status, created_at DESC);

-- +goose Down
DROP INDEX webhooks.deliveries_endpoint_status_idx;
DROP TABLE webhooks.api_tokens;
DROP INDEX webhooks.replays_account_idx;
DROP INDEX webhooks.replays_created_idx;
ALTER TABLE webhooks.replays
    DROP COLUMN kind, DROP COLUMN account, DROP COLUMN skipped, DROP COLUMN error, DROP COLUMN updated_at,
    ALTER COLUMN matched TYPE integer, ALTER COLUMN replayed TYPE integer;
