// Package maintenance holds the attempt log's periodic roles and endpoint
// health, beside the store they maintain: Maintainer keeps the daily
// partitions of webhooks.attempts ahead and drops the expired ones; Monitor
// disables endpoints that went on failing, and Announcer produces the
// endpoint.disabled event (package attemptlog's writer uses it too);
// Reconciler reports overdue deliveries. hookd runs them; they are not an API
// for applications.
//
// For endpoint health it owns what hookd does once an endpoint is disabled for bad
// health: the endpoint.disabled operational event (its JSON format, key and
// topic), producing it at least once after the disabling commit, the log
// line, the metrics, and the periodic Monitor that disables endpoints which
// went on failing without new attempts. The rules themselves (failing_since,
// 410, the disable-after threshold) are applied in Postgres by store, in the
// same transaction as the attempt log. It never sends HTTP to endpoints and
// never writes attempts.
//
// Owner alerts (alerts.go) are hookd's operational events delivered as the
// account's own signed webhooks: the Monitor's sweep produces
// hookd.endpoint.failing (an endpoint failing past WarnAfter, once per
// episode), hookd.endpoint.recovered and hookd.delivery.dead_lettered (one
// per endpoint per hour, with the count), and the Announcer
// hookd.endpoint.disabled, each as an event envelope to the events topic so
// the router fans it out to the endpoints subscribed to "hookd." types. Ids
// are derived from the episode, disablement or hour, and the bookkeeping in
// Postgres (store/alerts.go) marks each produced only after Kafka
// acknowledged it: at least once, with one id.
//
// Reconciler owns the periodic safety net over delivery state: it
// finds deliveries that have stayed non-terminal longer than their retry
// schedule allows and reports them (a metric and a log line with examples),
// and publishes the backlog gauges (oldest pending delivery). It only reads:
// it never re-sends, re-queues or changes a delivery, so a false alarm costs
// nothing but a log line.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package maintenance
