// Package dispatcher owns the delivery of webhooks: it consumes the
// deliveries topic and every retry tier in one consumer group, schedules
// records per endpoint inside each partition, signs and POSTs them through
// a per-endpoint circuit breaker and an SSRF guard, classifies the outcome,
// and produces the follow-up (next retry tier, dead letter) and one attempt
// record per attempt before it marks the source record done. It never
// writes Postgres, never follows a redirect, never re-serialises a body,
// and never commits an offset past a record it has not finished.
//
// # Assignment: why one group over deliveries and every tier, with Range
//
// All hookd delivery topics (deliveries, each retry tier, the DLQ) share
// one partition count, and a delivery keeps its partition number when it
// moves between them (the router hashes the endpoint id; the dispatcher
// produces retries and dead letters to the source record's partition
// number). The dispatcher group subscribes to deliveries and all tiers and
// uses the Range balancer, which, for topics with equal partition counts
// and members with equal subscriptions, gives partition i of every topic to
// the same member. So an endpoint's first attempts and its retries are
// handled by one process: one breaker and one in-flight limit per
// endpoint, not one per process. Cooperative balancers do not promise this
// co-location, which is why Range (an eager protocol: every rebalance
// revokes everything) is used. A member that leaves or dies hands all its
// partitions, deliveries and tiers together, to the others; a dead one
// (kill -9) after the group's session timeout, SessionTimeout (10s by
// default, not Kafka's 45s, so its endpoints wait that much less).
//
// # Scheduling inside a partition
//
// Records of a partition are queued per endpoint as they are read; up to
// MaxInFlight requests run per endpoint and Concurrency in all, endpoints
// taking turns (round-robin) for free slots. A slow endpoint therefore
// occupies at most its own MaxInFlight slots while the others proceed.
// An endpoint with a rate (Target.RatePerSec) starts a request at most
// every 1/rate seconds: over its rate it leaves the round-robin with one
// timer set for its next start time (re-reading its rate at least every
// second, so an endpoint update applies without a new record) while its
// records wait in its queue and the other endpoints proceed; the rate is
// per dispatcher process, which, with the co-partitioning below, is per
// endpoint. When an endpoint's queue reaches EndpointBacklog, further
// records go to the first retry tier without spending an attempt (outcome
// "deferred"); a rate-limited endpoint fed faster than its rate gets there
// too, as a slow one does. A delivery deferred again in a row (whatever
// the reason; the record counts its deferrals since its last attempt)
// goes to the second tier instead, so a delivery kept out for minutes is
// looked at every second-tier delay, not every first-tier one.
// When a partition holds PartitionMaxHeld unfinished records, fetching it
// pauses until it is under half.
//
// # Operator limits and the fair share between accounts
//
// What an account sets on its endpoints is bounded at run time, whatever
// is stored: an endpoint's max_in_flight by MaxEndpointInFlight, its
// timeout by Timeout (an endpoint may shorten the operator's timeout,
// never lengthen it). Concurrency is shared between accounts (the
// hookd-account of each record): while N accounts are active, an account
// starts a request only while it holds fewer than
// max(ceil(Concurrency/N), 4) requests; an account alone may use all of
// them. An account is active while it has requests in flight or records
// ready to start, and for AccountLinger after, so a tenant sending a
// trickle keeps its share between records. An endpoint whose account is at
// its share is parked with its account (not in the round-robin) until the
// account is under its share again; that check runs only when slots are
// free and nothing else is ready, so the per-record path stays O(1). A
// share is enforced when a request starts: an account that took every
// slot while alone gives them back as its requests end (within Timeout).
// Memory is shared the same way: once a partition holds half of
// PartitionMaxHeld, a record whose account holds its share (and other
// accounts are active) goes to the first retry tier without spending an
// attempt (error class fair_share) instead of waiting in its endpoint's
// queue, so one account's queued records cannot fill the partition and
// pause it, holding up the other accounts' records behind them; a
// partition an account filled while alone is emptied of its queued
// records down to half (newest first) by the periodic sweep once others
// are active.
//
// # The account check
//
// A record is sent only to an endpoint of its own account: a record whose
// hookd-account is not the endpoint's account (an endpoint id deleted by
// one account and created again by another) is dead-lettered with reason
// account_mismatch, checked when the record is routed and again before its
// request.
//
// # Circuit breakers
//
// Each endpoint has a breaker (BreakerConfig). Answers count when they
// arrive, so a request longer than the window counts all the same, and
// MinRequests failures in a row trip it however far apart: an endpoint
// whose requests all time out opens its breaker whatever its timeout. An
// SSRF refusal is logged at WARN once per endpoint (id and URL) every 10
// minutes, naming its account, host and the refused address.
//
// # Offsets: the watermark
//
// Records finish out of order. A partition's committed offset is its first
// unfinished record (the watermark), committed every CommitInterval, on
// revoke (after waiting up to RevokeTimeout for the revoked partitions'
// requests) and on shutdown (after draining). A crash re-delivers from the
// watermark: duplicates are possible (receivers dedupe on webhook-id),
// skips are not. A record is finished only after the broker acknowledged
// what it produced: the retry record or dead letter first, then the
// attempt record.
//
// # Retry tiers
//
// A retry record carries its due time. A partition whose head record is
// not due is paused and held (retrytiers.Gate) with one timer; when it
// fires, due records are released to their endpoints through the same
// queues, breakers and limits as first attempts. Records behind a held
// head wait behind it: a tier partition is in due order give or take the
// jitter. Only records already read are visible: the gauge of the oldest
// due record (hookd_dispatcher_tier_oldest_due_age_seconds) counts those
// waiting in an endpoint queue or behind the held head, not those the
// paused partition has not fetched yet.
//
// # HTTP client
//
// Every request goes through one net/http Transport (transport.go):
// HTTP/1.1, and HTTP/2 where the receiver offers it over TLS (ALPN). Its
// response parser and connection pool are the standard library's, held
// to account by the hostile-receiver suite (hostile_test.go): bytes left
// after a response, an unsolicited response on an idle connection, a
// body not read to its end (beyond ResponseReadLimit) each close the
// connection instead of handing it to the next request, which may be
// another account's endpoint on the same host. A POST whose request was
// written is never re-sent within its attempt (net/http retries only
// requests that were not written). The Transport is tuned rather than
// replaced: IdleConnsPerHost idle connections per host, a TLS session
// cache (a new connection to a known host resumes its session), HTTP/2
// health checks (a PING after 15s of silence, the connection closed when
// it is not answered within 5s), 64 KiB of response headers at most, and
// the request's Timeout over the whole exchange. Dials go through the
// SSRF guard, or through EgressProxy's CONNECT dialer, which checks the
// destination instead; TLS runs over either. https endpoints are verified
// against the system roots (SSL_CERT_FILE, SSL_CERT_DIR) plus
// EndpointCAFile's certificates.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package dispatcher
