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
// Reconciler owns the periodic safety net over delivery state: it
// finds deliveries that have stayed non-terminal longer than their retry
// schedule allows and reports them (a metric and a log line with examples),
// and publishes the backlog gauges (oldest pending delivery). It only reads:
// it never re-sends, re-queues or changes a delivery, so a false alarm costs
// nothing but a log line.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package maintenance
