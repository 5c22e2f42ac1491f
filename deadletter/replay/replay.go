// Package replay owns finding dead letters and sending them again: Scan
// streams the dead-letter topic through a Filter, ScanByTime does so in
// dead-letter time order (hookctl dlq list, GET /v1/dead-letters), and Run
// re-produces the matching dead letters to the deliveries topic, with the
// same webhook-id and a fresh attempt count, recording the request in
// webhooks.replays (hookctl dlq replay, hookctl endpoints resend, POST
// /v1/replays). A request is resumable: its progress (the next offset of
// every dead-letter partition) is saved only after the broker acknowledged
// the records replayed before it, and a resumed run first reads back what
// an interrupted run produced, so one request never replays a dead letter
// twice. A dead letter is replayed only to an existing endpoint of its own
// account (its hookd-account header), for a request of that account or an
// operator's; any other is skipped as account_mismatch and never sent. A
// dead letter is resolved once its delivery (same delivery id and account)
// is in state delivered in webhooks.deliveries, for example after an
// earlier replay or resend, or once a replay or resend sent it again since
// it was dead-lettered (by the replays' own record of what they sent,
// webhooks.replay_sends, written once Kafka acknowledged a chunk): requests
// skip it as already_delivered unless they include resolved dead letters
// (looked up once per fetched batch). ReadPayload reads any delivery's
// record (its payload) from the deliveries topic or its dead letter, and
// ResendDelivery sends one delivery again whatever its state, audited as a
// replay of kind delivery.
// A run waits out a Kafka outage (an unreachable broker, retriable errors)
// with backoff and one WARN line, then carries on from its saved progress;
// only a permanent Kafka error (kafkaconn.Permanent) or its context ending
// stops it. Reads never hand over a record twice, even when kgo resets a
// partition to its start after OFFSET_OUT_OF_RANGE.
//
// Files by job: request.go (the request, its validation and derived id),
// scan.go and read.go (DLQ ranges and reading them; merge.go for time
// order, ahead.go for reading one batch ahead), run.go and chunk.go (a real
// run), recover.go (what an interrupted run produced), outage.go (waiting
// out Kafka), dryrun.go, skip.go
// (why a dead letter is not replayed, resolved ones), pacer.go (--rate),
// payload.go (reading a delivery's record), resend.go (one delivery).
//
// It never sends HTTP (the dispatcher does, through the normal path),
// never holds more than two fetches (the batch being replayed and the next,
// looked up meanwhile; one per partition for ScanByTime) and one produce
// chunk in memory, and never changes a dead letter.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package replay

import (
	"context"
	"errors"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
)

// HeaderSource names, on a replayed delivery record, the dead letter it
// re-sends: "<partition>/<offset>" of the DLQ topic. A resumed replay reads
// it back to learn which records an interrupted run already produced.
const HeaderSource = "hookd-replay-source"

// Kinds of replay requests.
const (
	KindDLQ    = "dlq"    // hookctl dlq replay, POST /v1/replays
	KindResend = "resend" // hookctl endpoints resend, POST /v1/endpoints/{id}/resend
	// KindDelivery resends one delivery, whatever its state (ResendDelivery).
	KindDelivery = "delivery" // hookctl deliveries resend, POST /v1/deliveries/{id}/resend
)

// Skip reasons: why a matching dead letter was not replayed, the keys of
// Result.Skips (and of "skips" in a replay's progress).
const (
	// SkipUnreplayable: not a delivery (an invalid envelope, a malformed record).
	SkipUnreplayable = "unreplayable"
	// SkipEndpointDeleted: its endpoint no longer exists.
	SkipEndpointDeleted = "endpoint_deleted"
	// SkipEndpointDisabled: its endpoint is disabled and Force is not set.
	SkipEndpointDisabled = "endpoint_disabled"
	// SkipAccountMismatch: the record's account (its hookd-account header)
	// is not its endpoint's account, or not the account asking for the
	// replay. It is never sent: an endpoint never receives another
	// account's records.
	SkipAccountMismatch = "account_mismatch"
	// SkipOwnDeath: the death of a record this very replay sent.
	SkipOwnDeath = "died_in_this_replay"
	// SkipAlreadyDelivered: the dead letter is resolved: its delivery was
	// delivered since it was dead-lettered (by an earlier replay or
	// resend), and IncludeResolved is not set.
	SkipAlreadyDelivered = "already_delivered"
)

// Errors callers branch on.
var (
	// ErrInvalid wraps a bad request (missing reason, bad filter).
	ErrInvalid = errors.New("invalid replay request")
	// ErrEndpointDisabled refuses a replay to a disabled endpoint without Force.
	ErrEndpointDisabled = errors.New("endpoint is disabled")
	// ErrEndpointNotFound refuses a replay to an endpoint that does not exist
	// (or, for an account, belongs to another account).
	ErrEndpointNotFound = errors.New("endpoint not found")
	// ErrRequestMismatch: an explicit replay id names a different request.
	ErrRequestMismatch = errors.New("replay id belongs to a different request")
)

// Deps are what Scan and Run work with.
type Deps struct {
	Store *store.Store
	// KafkaOpts are the client options (seeds, logging); Run and Scan add
	// their own consume and produce options.
	KafkaOpts []kgo.Opt
	Names     topics.Names
	Logger    *slog.Logger
}

// Check validates req and refuses a target endpoint that does not exist
// (or is another account's) or is disabled without Force, without running
// anything: what an API answers before starting a replay in the background.
func Check(ctx context.Context, deps Deps, req *Request) error {
	if err := req.validate(); err != nil {
		return err
	}
	return checkTargetEndpoint(ctx, deps, req)
}

// Run carries out req: a dry run counts, a real run replays and resumes an
// interrupted run of the same request. It returns the audit row as saved.
// ctx ending interrupts the run (status interrupted, progress kept).
func Run(ctx context.Context, deps Deps, req Request) (Result, error) {
	if req.DryRun {
		if err := Check(ctx, deps, &req); err != nil {
			return Result{}, err
		}
		return dryRun(ctx, withLogger(deps), req)
	}
	p, err := Prepare(ctx, deps, req)
	if err != nil {
		return Result{}, err
	}
	return p.Run(ctx)
}

func withLogger(deps Deps) Deps {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return deps
}
