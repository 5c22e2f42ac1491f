-- hookd schema, version 21: a client certificate per endpoint for mutual
-- TLS (issue 31). client_cert is the PEM certificate chain; client_key its
-- PEM private key, encrypted by hookd like the signing secrets when a
-- secrets key is given ("v1:<key id>:<base64>", bound to the endpoint id);
-- client_cert_not_after the leaf's expiry, kept for the owner alert that
-- warns 14 days ahead. hookd checks that the key matches the certificate
-- before every write. Existing endpoints get none.

-- +goose Up

ALTER TABLE webhooks.endpoints
    ADD COLUMN client_cert text,
    ADD COLUMN client_key text,
    ADD COLUMN client_cert_not_after timestamptz,
    ADD CONSTRAINT endpoints_client_cert_pair
        CHECK ((client_cert IS NULL) = (client_key IS NULL) AND (client_cert IS NULL) = (client_cert_not_after IS NULL));

-- The expiry the owner was last warned about (hookd.endpoint.certificate_expiring):
-- one alert per certificate.
ALTER TABLE webhooks.endpoint_health ADD COLUMN warned_cert_not_after timestamptz;

COMMENT ON COLUMN webhooks.endpoints.client_key IS
    'PEM private key of the client certificate, v1:<key id>:<base64> when encrypted by hookd. Read it through hookd, never here.';

-- +goose Down

ALTER TABLE webhooks.endpoint_health DROP COLUMN warned_cert_not_after;

ALTER TABLE webhooks.endpoints
    DROP CONSTRAINT endpoints_client_cert_pair,
    DROP COLUMN client_cert_not_after,
    DROP COLUMN client_key,
    DROP COLUMN client_cert;
