-- hookd schema, version 14: replay ids belong to the account that chose
-- them (issue 29). They were global, so an account token posting an `id`
-- that another account used got 409 "taken by a different request": it
-- learned that the id existed, and could take an id before its owner did.
-- Now each account has its own ids, and operators (hookctl, the admin
-- token: account NULL) theirs. An id cannot be both an operator's and an
-- account's (store.CreateReplay refuses the second): a replay's id marks
-- the records it produces (hookd-replay-id), and an operator's replay,
-- which can cover every account's dead letters, must never take an
-- account's records for its own.

-- +goose Up
CREATE UNIQUE INDEX replays_scope_id_key ON webhooks.replays ((coalesce(account, '')), id);
ALTER TABLE webhooks.replays DROP CONSTRAINT replays_pkey;
CREATE INDEX replays_id_idx ON webhooks.replays (id);

-- +goose Down
DROP INDEX webhooks.replays_id_idx;
DROP INDEX webhooks.replays_scope_id_key;
ALTER TABLE webhooks.replays ADD PRIMARY KEY (id);
