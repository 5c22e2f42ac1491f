// Package attempt owns the record of one delivery attempt as it travels from
// a dispatcher to the Postgres attempt log over the attempts topic
// (key = delivery id, value = JSON). A dispatcher never writes Postgres on
// its hot path; it produces these, and the attempt-log writer copies them
// into webhooks.attempts and updates webhooks.deliveries. It never does I/O.
//
// Internal: only hookd's own packages can import it.
package attempt

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Outcome is what one attempt came to.
type Outcome string

// Outcomes, as classified by the dispatcher.
const (
	OutcomeDelivered   Outcome = "delivered"    // 2xx
	OutcomeRetry       Outcome = "retry"        // 408, 429, 5xx, timeout, network error, other 4xx below the limit
	OutcomeGone        Outcome = "gone"         // 410: the endpoint is disabled
	OutcomePermanent   Outcome = "permanent"    // a 4xx for the third time, or another permanent failure
	OutcomeRefused     Outcome = "refused"      // the SSRF guard refused the destination
	OutcomeCircuitOpen Outcome = "circuit_open" // no request made: the endpoint's breaker is open
	OutcomeDeferred    Outcome = "deferred"     // no request made: the endpoint's backlog was full
	OutcomeSkipped     Outcome = "skipped"      // no request made: endpoint disabled or deleted
	// OutcomeUnknown: a request was sent, and the dispatcher stopped
	// (crashed, or drained past its timeout) before its answer was
	// recorded. Recorded by the next owner of the record's partition from
	// the request's intent record (see IntentHeader), which then sends the
	// delivery again: the receiver may have had it twice.
	OutcomeUnknown Outcome = "unknown"
)

// ErrorUnknown is the error text of an OutcomeUnknown record.
const ErrorUnknown = "the dispatcher stopped during this request; its outcome is unknown"

// IntentHeader marks an intent record on the intents topic: produced and
// acknowledged before requests go on the wire, it names them (Intent,
// IntentBatch). The dispatcher that resumes the partition reads it back
// and, when no attempt record with an intent's attempt_id follows, makes
// that request's attempt record of outcome unknown from its delivery
// record and produces it to the attempts topic. Dispatchers before the
// intents topic wrote intents (whole attempt records) to the attempts
// topic, and the attempt-log writer skips records carrying the header
// there without decoding them (IsIntent).
const IntentHeader = "hookd-intent"

// IsIntent reports whether kr is an intent record (IntentHeader).
func IsIntent(kr *kgo.Record) bool {
	for _, h := range kr.Headers {
		if h.Key == IntentHeader {
			return true
		}
	}
	return false
}

// NextAction is what happened to the delivery after the attempt.
type NextAction string

// Next actions.
const (
	NextDone       NextAction = "done"        // delivered
	NextRetry      NextAction = "retry"       // produced to a retry tier, due at NextDueAt
	NextDeadLetter NextAction = "dead_letter" // produced to the DLQ at DLQ
)

// Position is a record's place in Kafka.
type Position struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Record is one attempt.
type Record struct {
	// AttemptID is unique per attempt; writing the same record twice is a no-op.
	AttemptID    string    `json:"attempt_id"`
	DeliveryID   string    `json:"delivery_id"`
	EventID      string    `json:"event_id"`
	EventType    string    `json:"event_type"`
	EndpointID   string    `json:"endpoint_id"`
	Account      string    `json:"account"`
	EventCreated time.Time `json:"event_created"`
	// Attempt is the attempt number, starting at 1.
	Attempt int `json:"attempt"`
	// Tier is the topic the delivery was read from (deliveries or a retry tier).
	Tier       string        `json:"tier"`
	StartedAt  time.Time     `json:"started_at"`
	Duration   time.Duration `json:"duration_ns"`
	StatusCode int           `json:"status_code,omitempty"`
	Outcome    Outcome       `json:"outcome"`
	// ErrorClass is a short machine-readable cause: http_5xx, timeout,
	// connect_refused, ssrf_refused, circuit_open, ...
	ErrorClass string `json:"error_class,omitempty"`
	Error      string `json:"error,omitempty"`
	// ResponseExcerpt is the start of the response body, capped.
	ResponseExcerpt string     `json:"response_excerpt,omitempty"`
	NextAction      NextAction `json:"next_action"`
	// NextDueAt is set with NextRetry.
	NextDueAt time.Time `json:"next_due_at,omitzero"`
	// DLQ and DeadReason are set with NextDeadLetter.
	DLQ        *Position `json:"dlq,omitempty"`
	DeadReason string    `json:"dead_reason,omitempty"`
	ReplayID   string    `json:"replay_id,omitempty"`
	// Destination is the endpoint URL the request was sent to, as it was
	// at the time of the attempt; empty when no request was made.
	Destination string `json:"destination,omitempty"`
	// BodySHA256 is the lowercase hex SHA-256 of the exact request body
	// sent (the evidence of what was delivered); empty when no request was
	// made.
	BodySHA256 string `json:"body_sha256,omitempty"`
	// Source is the position of the delivery record the attempt was made
	// for; the dispatcher produces the attempt record to the attempts
	// partition of the same number, and reads it back after a crash or a
	// rebalance to skip the records already answered. Nil in records of
	// older dispatchers.
	Source *Position `json:"source,omitempty"`
}

// Validate reports a record the attempt log cannot store.
func (r *Record) Validate() error {
	switch {
	case r.AttemptID == "":
		return errors.New("attempt record: no attempt_id")
	case r.DeliveryID == "" || r.EventID == "" || r.EndpointID == "":
		return errors.New("attempt record: delivery_id, event_id and endpoint_id are required")
	case r.Attempt < 0:
		return fmt.Errorf("attempt record: attempt %d is negative", r.Attempt)
	case r.StartedAt.IsZero():
		return errors.New("attempt record: no started_at")
	case r.Outcome == "" || r.NextAction == "":
		return errors.New("attempt record: outcome and next_action are required")
	case r.NextAction == NextDeadLetter && r.DLQ == nil:
		return errors.New("attempt record: dead_letter without a DLQ position")
	}
	return nil
}

// KafkaRecord encodes r for the attempts topic.
func (r *Record) KafkaRecord(topic string) (*kgo.Record, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	// Encoded into a reused buffer, then copied into one allocation of
	// the exact size that the key and the value share.
	sp := scratches.Get().(*[]byte)
	defer scratches.Put(sp)
	v, ok := r.appendJSON((*sp)[:0])
	*sp = v[:0] // keep what it grew to
	if !ok {
		c := *r // json.Marshal keeps its argument: r itself stays off the heap
		v, err := json.Marshal(&c)
		if err != nil {
			return nil, fmt.Errorf("encoding attempt record: %w", err)
		}
		return &kgo.Record{Topic: topic, Key: []byte(r.DeliveryID), Value: v}, nil
	}
	k := len(r.DeliveryID)
	b := append(append(make([]byte, 0, k+len(v)), r.DeliveryID...), v...)
	return &kgo.Record{Topic: topic, Key: b[:k:k], Value: b[k:]}, nil
}

// scratches are the buffers KafkaRecord encodes into.
var scratches = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Decode reads an attempts-topic record.
func Decode(kr *kgo.Record) (*Record, error) {
	r, ok := decodeFast(kr.Value)
	if !ok {
		r = Record{}
		if err := json.Unmarshal(kr.Value, &r); err != nil {
			return nil, fmt.Errorf("decoding attempt record: %w", err)
		}
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}
