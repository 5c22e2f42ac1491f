// Package chaos is hookd's proof harness: it runs the real hookd binaries as
// separate processes (the embedded broker persisted in a directory, the
// relay, the router, several dispatchers and the attempt-log writer) against
// a real Postgres, drives them with a load generator that writes events
// through the outbox (real transactions, some rolled back) and the ingress
// topic, receives every webhook on 127.0.0.1 receivers (http, or https with
// ReceiverOptions.TLS: HTTP/2 or HTTP/1.1 by ALPN) that verify the
// Standard Webhooks signature and record each request by webhook-id, and
// injects faults: kill -9 and restarts, broker and Postgres restarts,
// misbehaving receivers, rebalance storms.
//
// The Checker knows every event produced (committed, rolled back or of
// unknown outcome) and every request received, reads the dead-letter topic
// and the Postgres attempt log, and reports lost, duplicated,
// delivered-but-rolled-back and dead-lettered deliveries and the attempt log
// versus receiver log mismatches, requests sent versus attempt rows.
// AttributeDuplicates counts the requests in flight at each Fault (a
// dispatcher's connections to the receivers, read from /proc while it is
// frozen, and the attempts topic's offsets) and attributes every duplicate
// to a fault. The scenarios in chaos_test.go assert the invariants and the
// per-fault duplicate bound; bench/hookbench reuses the cluster, receivers and load generator
// for the benchmark.
//
// It is test and benchmark tooling: it never talks to anything but
// 127.0.0.1 and the Postgres it is given, every loop it runs is bounded in
// time, and nothing in the product imports it.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package chaos
