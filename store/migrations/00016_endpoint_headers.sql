-- hookd schema, version 16: custom headers per endpoint (issue 31), sent
-- with every request to it. A JSON object of header name to value; hookd
-- validates it (at most 20, RFC 9110 names and values, no webhook-*,
-- content-*, host, user-agent or hop-by-hop name) before every write, the
-- CHECK only keeps the shape the dispatcher reads. Existing endpoints get
-- none.

-- +goose Up

ALTER TABLE webhooks.endpoints
    ADD COLUMN headers jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(headers) = 'object');

COMMENT ON COLUMN webhooks.endpoints.headers IS
    'Custom headers sent with every request: {"Name": "value"}. Written through hookd, which refuses reserved names.';

-- +goose Down

ALTER TABLE webhooks.endpoints DROP COLUMN headers;
