-- hookd schema, version 14: endpoint signing secrets may be encrypted at rest
-- (issue 29). The column keeps its type: each element is either a plain
-- "whsec_<base64>" secret (installations without a key, rows written before
-- one was given) or "v1:<key id>:<base64 nonce + AES-256-GCM ciphertext>",
-- sealed by hookd's store with the key of that id and bound to the row's
-- endpoint id. Nothing is rewritten here: hookd seals on every write once a
-- key is given, and `hookd secrets rotate-key` seals the rest online.

-- +goose Up

COMMENT ON COLUMN webhooks.endpoints.secrets IS
    'Signing secrets, current first: whsec_<base64> in plain text, or v1:<key id>:<base64> encrypted by hookd (AES-256-GCM; see docs/operations.md, Secrets at rest). Read them through hookd, never here.';

-- +goose Down

COMMENT ON COLUMN webhooks.endpoints.secrets IS NULL;
