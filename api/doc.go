// Package api is hookd's one HTTP package, served on --listen. Server
// (Listen, Run) answers liveness (/healthz), readiness (/readyz: Kafka and
// Postgres answer) and Prometheus metrics (/metrics, hookd's own registry),
// and defends the listener, which the portal makes customer-facing: read,
// write and idle timeouts, caps on the connections open at once in total
// and per client address (a net.Listener wrapper that closes the ones
// beyond on accept), and a bound on every request body before routing and
// authentication (listener.go),
// and mounts V1, the JSON API under /v1/: endpoints CRUD, the delivery log
// and attempt timelines, dead letters, replay and resend, one file per
// resource, and the OpenAPI document that describes them (openapi.yaml,
// served at /v1/openapi.yaml).
//
// V1 authenticates bearer tokens (the admin token, or an account token
// created with hookctl tokens create) and scopes every read and write to
// the caller's account: another account's resource answers 404, exactly as
// a missing one. Handlers never block on Kafka or Postgres for longer than
// a short timeout, and the package never delivers webhooks itself: replays
// go through package deadletter/replay onto the deliveries topic like every
// other delivery.
//
// Applications should not import this package: it is hookd's own code, with
// no compatibility promise. They call it over HTTP (docs/api.md,
// openapi.yaml).
package api
