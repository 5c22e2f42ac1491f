-- hookd schema, version 19: payload filters per endpoint (issue 31). A JSON
-- object in hookd's filter language (docs/api.md, Payload filters) that an
-- event must match, on top of the event types, to be delivered to the
-- endpoint; NULL when none. hookd checks it before every write; the CHECK
-- only keeps the shape. Existing endpoints get none.

-- +goose Up

ALTER TABLE webhooks.endpoints
    ADD COLUMN filter jsonb
        CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object');

COMMENT ON COLUMN webhooks.endpoints.filter IS
    'Payload filter the router applies when it fans out: {"data": {"amount": {"$gte": 100}}}. Written through hookd, which validates it.';

-- +goose Down

ALTER TABLE webhooks.endpoints DROP COLUMN filter;
