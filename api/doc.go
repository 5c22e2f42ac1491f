// Package api is hookd's one HTTP package, served on --listen: Server
// (Listen, Run) answers liveness (/healthz), readiness (/readyz) and
// Prometheus metrics (/metrics) and mounts V1, the JSON API under /v1/ (one
// file per resource). Applications do not import it: they call it over HTTP
// (docs/api.md, openapi.yaml).
//
// Server owns hookd's HTTP surface on --listen: liveness (/healthz),
// readiness (/readyz: Kafka and Postgres answer), Prometheus metrics
// (/metrics, hookd's own registry) and, as it grows, the JSON API. Handlers
// never block on Kafka or Postgres for longer than a short timeout.
//
// V1 owns hookd's JSON API under /v1/ on --listen: endpoints
// CRUD, the delivery log and attempt timelines, dead letters, replay and
// resend, and the OpenAPI document that describes them (openapi.yaml,
// served at /v1/openapi.yaml). It authenticates bearer tokens (the admin
// token, or an account token created with hookctl tokens create) and
// scopes every read and write to the caller's account: another account's
// resource answers 404, exactly as a missing one. It never delivers
// webhooks itself: replays go through package replay onto the deliveries
// topic like every other delivery.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package api
