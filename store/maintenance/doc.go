// Package maintenance holds hookd's periodic roles over the store, beside
// the store they maintain. All three run at once, then every interval, with
// one shared loop (everyInterval); a failed pass is counted, logged once and
// tried again at the next interval.
//
//   - Maintainer keeps the daily partitions of webhooks.attempts ahead,
//     drops the expired ones, and erases the expired attempts that delivery
//     rows hold (their a_* columns), so no attempt outlives the retention.
//   - Monitor applies endpoint health: it disables endpoints that went on
//     failing without new attempts and sends the owner alerts. The rules
//     themselves (failing_since, 410, the disable-after threshold) are
//     applied in Postgres by package store, in the same transaction as the
//     attempt log.
//   - Reconciler is the safety net over delivery state: it reports
//     deliveries non-terminal for longer than their schedule allows (a
//     metric and a log line with examples) and the backlog gauges. It only
//     reads: it never re-sends or changes a delivery.
//
// Announcer produces what an endpoint's health means to others: the
// endpoint.disabled event on webhooks.ops (its JSON format, key and topic;
// package attemptlog's writer uses it too) and the owner alerts
// (alerts.go): hookd.endpoint.failing (past WarnAfter, once per episode),
// hookd.endpoint.recovered, hookd.endpoint.disabled and
// hookd.delivery.dead_lettered (per endpoint per hour, with a count), each an
// event envelope on the events topic so the router fans it out to the
// account's endpoints subscribed to "hookd." types. Ids derive from the
// episode, disablement or hour, and the bookkeeping in Postgres marks each
// produced only after Kafka acknowledged it: at least once, with one id.
// Nothing here sends HTTP to endpoints or writes attempts.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package maintenance
