-- hookd schema, version 7: the delivery portal (/portal/): one-time links,
-- browser sessions, the portal's own audit trail, and the indexes its pages
-- read the delivery log and the attempt log through.

-- +goose Up

-- A portal link: a one-time URL that opens the portal for one account (and
-- optionally one endpoint of it). Only the SHA-256 of its token is stored;
-- the token is shown once, when created (hookctl portal link, POST
-- /v1/portal-links). Using it sets used_at in the transaction that creates
-- the session, so a link opens at most one session.
CREATE TABLE webhooks.portal_links (
    id           text        PRIMARY KEY,
    token_sha256 bytea       NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    account      text        NOT NULL CHECK (account <> ''),
    endpoint_id  text,
    level        text        NOT NULL CHECK (level IN ('read', 'manage')),
    -- Who created it: "hookctl", "api:admin", "api:<account>".
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX portal_links_expires_idx ON webhooks.portal_links (expires_at);

-- A portal session: what the browser's cookie names (by the SHA-256 of its
-- value). A customer session is bound to its link's account, endpoint and
-- level; a support session (signed in with the admin token) has no account
-- until it acts on behalf of one. It ends when idle for longer than the
-- portal's idle limit, after its absolute limit, or when revoked (sign-out).
CREATE TABLE webhooks.portal_sessions (
    id            text        PRIMARY KEY,
    token_sha256  bytea       NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    account       text,
    endpoint_id   text,
    level         text        NOT NULL CHECK (level IN ('read', 'manage', 'support')),
    link_id       text,
    -- The CSRF token every form of this session carries.
    csrf_token    text        NOT NULL,
    -- A one-time notice shown by the next page (post/redirect/get).
    flash         jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz,
    CHECK (level = 'support' OR account IS NOT NULL)
);
CREATE INDEX portal_sessions_created_idx ON webhooks.portal_sessions (created_at);

-- What was done in the portal, by whom: endpoint edits, enabling and
-- disabling, secret rotations, test events, replays started, support
-- sign-ins and switches. Replays keep their own audit row in
-- webhooks.replays as well.
CREATE TABLE webhooks.portal_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    account     text,
    action      text        NOT NULL,
    target      text        NOT NULL DEFAULT '',
    detail      text        NOT NULL DEFAULT ''
);
CREATE INDEX portal_audit_account_idx ON webhooks.portal_audit (account, at DESC);

-- The delivery log of one account, newest first, keyset-paginated on
-- (created_at, id), with or without a status filter.
CREATE INDEX deliveries_account_created_idx ON webhooks.deliveries (account, created_at DESC, id DESC);
CREATE INDEX deliveries_account_status_idx ON webhooks.deliveries (account, status, created_at DESC, id DESC);

-- Endpoint health over a window (24 h, 7 d, 30 d): the attempts of one
-- endpoint by start time, on every daily partition.
CREATE INDEX attempts_endpoint_started_idx ON webhooks.attempts (endpoint_id, started_at);

-- +goose Down
DROP INDEX webhooks.attempts_endpoint_started_idx;
DROP INDEX webhooks.deliveries_account_status_idx;
DROP INDEX webhooks.deliveries_account_created_idx;
DROP TABLE webhooks.portal_audit;
DROP TABLE webhooks.portal_sessions;
DROP TABLE webhooks.portal_links;
