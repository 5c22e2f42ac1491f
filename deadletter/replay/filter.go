package replay

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
)

// Filter selects dead letters. Zero fields match everything.
type Filter struct {
	// EndpointID matches the record key (the endpoint id).
	EndpointID string `json:"endpoint,omitempty"`
	// Account matches the hookd-account header.
	Account string `json:"account,omitempty"`
	// EventType matches the hookd-event-type header; "*" wildcards as in
	// endpoint subscriptions ("invoice.*").
	EventType string `json:"event_type,omitempty"`
	// Reason matches the hookd-dlq-reason header exactly
	// (retries_exhausted, endpoint_gone, ...).
	Reason string `json:"dlq_reason,omitempty"`
	// Since and Until bound the dead letter's Kafka timestamp (when it was
	// dead-lettered): Since <= t < Until.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
}

// Validate reports a filter that cannot match anything sensible.
func (f Filter) Validate() error {
	if f.EndpointID != "" {
		if err := endpoint.ValidateID(f.EndpointID); err != nil {
			return err
		}
	}
	if f.Account != "" {
		if err := endpoint.ValidateAccount(f.Account); err != nil {
			return err
		}
	}
	if f.EventType != "" {
		if err := endpoint.ValidatePattern(f.EventType); err != nil {
			return err
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return fmt.Errorf("time range: since (%s) must be before until (%s)", f.Since.Format(time.RFC3339), f.Until.Format(time.RFC3339))
	}
	return nil
}

// Match reports whether e passes the filter.
func (f Filter) Match(e *Entry) bool {
	switch {
	case f.EndpointID != "" && e.EndpointID != f.EndpointID:
		return false
	case f.Account != "" && e.Account != f.Account:
		return false
	case f.EventType != "" && !endpoint.MatchType(f.EventType, e.EventType):
		return false
	case f.Reason != "" && e.Reason != f.Reason:
		return false
	case !f.Since.IsZero() && e.DeadAt.Before(f.Since):
		return false
	case !f.Until.IsZero() && !e.DeadAt.Before(f.Until):
		return false
	}
	return true
}

// ParseTime reads a time bound: RFC 3339 ("2026-05-01T10:00:00Z"), or a
// duration before now ("24h", "90m", "7d").
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		// At most 100 years: more would overflow time.Duration.
		n, err := strconv.Atoi(days)
		if err == nil && n >= 0 && n <= 36500 {
			return now.Add(-time.Duration(n) * 24 * time.Hour), nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-05-01T10:00:00Z) or a duration ago (24h, 90m, 7d)", s)
	}
	return now.Add(-d), nil
}

// Entry is one dead letter as read from the DLQ topic.
type Entry struct {
	Partition  int32     `json:"partition"`
	Offset     int64     `json:"offset"`
	DeadAt     time.Time `json:"dead_at"`
	EndpointID string    `json:"endpoint_id"`
	Account    string    `json:"account,omitempty"`
	EventID    string    `json:"event_id,omitempty"`
	EventType  string    `json:"event_type,omitempty"`
	DeliveryID string    `json:"delivery_id,omitempty"`
	Reason     string    `json:"reason"`
	Attempts   int       `json:"attempts"`
	LastStatus int       `json:"last_status,omitempty"`
	ErrorClass string    `json:"error_class,omitempty"`
	// ReplayID is set when the dead letter is itself the death of a replay.
	ReplayID string `json:"replay_id,omitempty"`
	// Unreplayable says why the record cannot be replayed as a delivery
	// (an invalid event envelope, a malformed record); empty when it can.
	Unreplayable string `json:"unreplayable,omitempty"`

	delivery *delivery.Delivery
}

// decode reads a DLQ record. It never fails: what cannot be read is
// described in Unreplayable.
func decode(r *kgo.Record) Entry {
	e := Entry{Partition: r.Partition, Offset: r.Offset, DeadAt: r.Timestamp.UTC(), EndpointID: string(r.Key)}
	p, perr := deadletter.Read(r)
	e.Reason, e.Attempts, e.LastStatus, e.ErrorClass = p.Reason, p.Attempts, p.LastStatus, p.ErrorClass
	d, derr := delivery.Decode(r)
	if derr == nil {
		e.delivery = d
		e.Account, e.EventID, e.EventType, e.DeliveryID, e.ReplayID = d.Account, d.EventID, d.EventType, d.ID, d.ReplayID
	}
	switch {
	case perr != nil:
		e.Unreplayable = perr.Error()
	case p.Reason == deadletter.ReasonOversize || p.Reason == deadletter.ReasonUnpublishable:
		e.fromSummary(r)
	case derr != nil:
		e.Unreplayable = derr.Error()
	case p.Reason == deadletter.ReasonInvalidEnvelope || p.Reason == deadletter.ReasonMalformed:
		e.Unreplayable = "not a delivery: " + p.Reason
	}
	return e
}

// fromSummary fills e from a dead letter that stands for an outbox row the
// relay could not publish: it names the event, but there is no delivery to
// send again (the row is in webhooks.outbox until pruned).
func (e *Entry) fromSummary(r *kgo.Record) {
	e.EndpointID = ""
	e.Unreplayable = "not a delivery: " + e.Reason + " (the event was never published; see its outbox row)"
	if s, err := deadletter.ReadSummary(r); err == nil {
		e.Account, e.EventID, e.EventType = s.Account, s.EventID, s.EventType
		if s.OutboxID != "" {
			e.Unreplayable = fmt.Sprintf("not a delivery: %s (the event was never published; outbox row %s)", e.Reason, s.OutboxID)
		}
	}
}

// errStop ends a scan early without an error.
var errStop = errors.New("stop")
