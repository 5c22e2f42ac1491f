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
// default, not Kafka's 45s, so its endpoints wait that much less). A
// dynamic member restarted after a crash joins as a new member, and every
// member revokes and waits for the dead one's session: no delivery at all
// for up to SessionTimeout. With InstanceID the dispatcher is a static
// member: its restart takes the dead one's place and partitions with no
// rebalance (one of live members, about a second, when it led the group);
// a graceful stop leaves explicitly (static.go).
//
// # A record's path, and who owns what
//
// One goroutine, the loop (loop.go), owns all scheduling state: a core
// (internal/sched) that does no I/O, takes inputs and returns commands.
// No lock guards it; everything else talks to the loop through channels.
// A record goes, in order:
//
//   - admission (admit.go): the poll loop decodes a fetch and hands it
//     to the loop, which admits it into the core;
//   - routing (internal/sched): the core holds it in its partition (for
//     the watermark), holds it behind a retry record not yet due, skips
//     it (deleted or disabled endpoint, another account's endpoint,
//     malformed), defers it, or queues it on its endpoint; it starts
//     requests while slots are free (command Start);
//   - sending (attempt.go): one of Concurrency requesters re-checks the
//     endpoint, produces the request's intent record, makes the attempt
//     through the breaker and the sender, and tells the loop its slots are
//     free;
//   - finishing (finish.go): the requester (or, when it must wait for a
//     retry record or dead letter, a goroutine of its own) produces them,
//     then the attempt record, and tells the loop the record is done once
//     the broker acknowledged them;
//   - committing (commit.go): every CommitInterval, on revoke and on
//     shutdown, the core's watermarks are committed.
//
// Other files: dispatcher.go (Run, the Kafka client's options), resume.go
// (the read-back of the attempts topic at assignment),
// produce.go (produces retried through outages), breaker.go, refusals.go
// (SSRF warnings), slowwatch.go, metrics.go, config.go, endpoints.go, and
// the HTTP side: send.go and the client it uses, outcome.go (the one
// classification), egress.go.
//
// The core's rules (internal/sched's doc has them whole): up to
// MaxInFlight requests per endpoint (an endpoint's own max_in_flight,
// capped by MaxEndpointInFlight whatever is stored; its timeout is capped
// by Timeout the same way) and Concurrency in all, endpoints taking
// turns; an endpoint's rate (Target.RatePerSec) spaces its starts;
// while N accounts are active an account starts a request only while it
// holds fewer than max(ceil(Concurrency/N), 4) (an account alone may use
// them all; an account stays active for AccountLinger after its last
// request). A record goes to a retry tier without spending an attempt
// (outcome "deferred"; a second deferral in a row waits on the second
// tier) only when its endpoint or account holds its slots: an endpoint
// with EndpointBacklog records queued that is waiting on its rate or has
// had no answer for a second at its in-flight limit (backlog_full), or an
// account at its share with no answer for a second, other accounts
// active and its partition half full (fair_share; a partition such an
// account filled is shed, newest first, down to half). Healthy endpoints
// are never deferred, however busy: their records wait, and a partition
// holding PartitionMaxHeld records pauses fetching until it is under half
// (backpressure).
//
// # Ordered endpoints
//
// An endpoint with ordering fifo (Target.FIFO) gets one request at a time,
// in its partition's order (fifo.go; the core's rules in internal/sched's
// fifo.go): a failed attempt is not produced to a retry tier but held by
// the core, not running, and started again at its schedule's due time
// before the endpoint's later records; one out of attempts is
// dead-lettered, acknowledged, before the next starts. Its attempt
// records carry RetryInPlaceHeader, so a resume does not skip it as
// answered: the watermark has not passed it, and the next owner starts
// from it (its schedule over).
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
// requests) and on shutdown (after draining). A crash re-reads from the
// watermark, and skips are impossible. A record is finished only after
// the broker acknowledged what it produced: the retry record or dead
// letter first, then the attempt record.
//
// # Resuming a partition: what was answered is not sent again
//
// Records past the watermark may have been answered (behind one slow
// request, thousands are), so the watermark alone would re-send them all.
// Every attempt record goes to the attempts partition of its source
// record's number (the manual partitioner: every hookd topic has one
// partition count) and names its source (topic, partition, offset).
// Before a request goes on the wire, its intent record (with the
// hookd-intent header; an intent names the request: attempt id, source
// position, attempt number, start, destination) is produced to the intents topic by a second client, without linger,
// and acknowledged: no request is sent without a trace. One goroutine
// writes them (intents.go): the intents of the requests started while one
// record is produced go into the next, one record for many under load.
// The intents topic has one partition, so a produce request carries one
// batch of them, and the attempt-log writer never fetches them. That wait is
// Kafka's, not the endpoint's: the core is told when the request goes on
// the wire (Sent), and an endpoint's "no answer for a second" runs from
// its last answer or send.
//
// When a partition is assigned, the poll loop holds its first fetched
// records and reads the attempts partition of its number and the intents
// topic back (resume.go; a client of its own, no group; ListOffsets by
// time) from ResumeMargin before the first record was written, or due if
// later, to the end offsets.
// Nothing past the watermark was attempted before the watermark's record
// (records are routed in order, a tier's only once due), so no attempt of
// those records is older. Records found answered are admitted marked and
// the core finishes them at once, without a request
// (hookd_dispatcher_resume_skipped_total); for an intent with no attempt
// record of its attempt id, the attempt record of a request whose outcome
// is unknown is made from its delivery record (read again by offset when
// the first fetch stopped before it) and produced to the attempts
// partition, and the delivery is sent again
// (hookd_dispatcher_resume_unknown_total). The read-back also reads the
// partitions of that number of every retry tier and of the DLQ
// (followup.go): a record's retry record or dead letter is acknowledged
// before its attempt record, so a process killed between the two leaves
// the follow-up without the attempt record that finishes its source. A
// record whose follow-up is found (a retry record names its source in
// hookd-source, a dead letter in its provenance) is answered, and the lost
// attempt record is made from the follow-up (its status, error class and
// next step); sent again, the delivery would fork into two chains of
// attempts. When this process saw Kafka
// fail in the last SessionTimeout plus 5s (an outage counts until it
// ends), the read-back first goes on reading for 5s after it began, and
// until the request deadline
// (start plus Timeout) plus 5s of each intent still without its attempt
// record: after a broker fault a partition may be lost without a revoke
// (its owner's membership ended under it: a broker restarted without its
// group state, or frozen past the session timeout) and assigned to
// another member while its previous owner still runs, starts and records
// requests. The duplicates left
// are those requests only: the ones on the wire when a process died, and
// the ones answered within produceLinger before, whose attempt records
// were not acknowledged yet. A
// read-back that fails within 30s is counted and logged, and its records
// are sent again from the watermark (at-least-once, never a skip).
//
// Stopping (ctx cancelled) and losing partitions in a rebalance wait for
// the requests in flight (DrainTimeout, three quarters of RevokeTimeout)
// and commit; the next owner skips what was answered past the commit, so
// scaling and rolling restarts send nothing twice. The read-back runs at
// every assignment: Range is eager, every rebalance reassigns everything.
//
// # Retry tiers
//
// A retry record carries its due time. A partition whose head record is
// not due is paused and held, with the core's one timer at its due time;
// then due records are released to their endpoints through the same
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
