// Package delivery owns the Kafka wire format of one delivery (one event for
// one endpoint) as it travels on webhooks.deliveries, the retry tiers and the
// dead-letter topic: the key is the endpoint id, the value is the exact
// webhook body that will be signed and POSTed (never re-serialised), and the
// headers carry identity and retry bookkeeping. It never does I/O.
//
// Internal: only hookd's own packages can import it.
package delivery

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header names carried by every delivery record. They are part of hookd's
// public contract: operators read them with kcat.
const (
	HeaderDeliveryID   = "hookd-delivery-id"   // deterministic id of (event, endpoint)
	HeaderEventID      = "hookd-event-id"      // the webhook-id receivers dedupe on
	HeaderEventType    = "hookd-event-type"    // e.g. invoice.paid
	HeaderEndpointID   = "hookd-endpoint-id"   // same as the record key
	HeaderAccount      = "hookd-account"       // the endpoint's account
	HeaderEventCreated = "hookd-event-created" // RFC 3339 creation time of the event
	HeaderAttempt      = "hookd-attempt"       // number of the next attempt, starting at 1
	HeaderFirstAttempt = "hookd-first-attempt" // RFC 3339, set once the first attempt was made
	HeaderDueAt        = "hookd-due-at"        // RFC 3339, on retry tiers: not before this time
	HeaderLastStatus   = "hookd-last-status"   // HTTP status of the previous attempt, if any
	HeaderLastError    = "hookd-last-error"    // error class of the previous attempt, if any
	HeaderReplayID     = "hookd-replay-id"     // set on records re-sent by a replay
	HeaderClientErrors = "hookd-client-errors" // count of consistent 4xx answers so far
)

// Delivery is one event for one endpoint.
type Delivery struct {
	ID           string
	EventID      string
	EventType    string
	EndpointID   string
	Account      string
	EventCreated time.Time
	// Attempt is the number of the next attempt, starting at 1.
	Attempt int
	// FirstAttempt is when the first attempt was made; zero before it.
	FirstAttempt time.Time
	// DueAt is the earliest time of the next attempt; zero means now.
	DueAt time.Time
	// LastStatus and LastError describe the previous attempt, if any.
	LastStatus int
	LastError  string
	// ClientErrors counts consistent 4xx answers (the 3-strikes rule).
	ClientErrors int
	ReplayID     string
	// Body is the exact JSON the endpoint receives.
	Body []byte
}

// ID returns the deterministic delivery id of (eventID, endpointID): a
// re-read of the same event yields the same delivery.
func ID(eventID, endpointID string) string {
	h := sha256.Sum256([]byte(eventID + "\x00" + endpointID))
	return "dlv_" + hex.EncodeToString(h[:12])
}

// body is the webhook payload of PRODUCT.md, in this field order.
type body struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Created string          `json:"created"`
	Data    json.RawMessage `json:"data"`
}

// Body renders the webhook body for an event. data must be valid JSON.
func Body(eventID, eventType string, created time.Time, data json.RawMessage) ([]byte, error) {
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	b, err := json.Marshal(body{ID: eventID, Type: eventType, Created: created.UTC().Format(time.RFC3339Nano), Data: data})
	if err != nil {
		return nil, fmt.Errorf("rendering webhook body: %w", err)
	}
	return b, nil
}

// Record encodes d for topic.
func (d *Delivery) Record(topic string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Key: []byte(d.EndpointID), Value: d.Body}
	add := func(k, v string) {
		if v != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderDeliveryID, d.ID)
	add(HeaderEventID, d.EventID)
	add(HeaderEventType, d.EventType)
	add(HeaderEndpointID, d.EndpointID)
	add(HeaderAccount, d.Account)
	add(HeaderEventCreated, formatTime(d.EventCreated))
	add(HeaderAttempt, strconv.Itoa(max(d.Attempt, 1)))
	add(HeaderFirstAttempt, formatTime(d.FirstAttempt))
	add(HeaderDueAt, formatTime(d.DueAt))
	if d.LastStatus != 0 {
		add(HeaderLastStatus, strconv.Itoa(d.LastStatus))
	}
	add(HeaderLastError, d.LastError)
	if d.ClientErrors != 0 {
		add(HeaderClientErrors, strconv.Itoa(d.ClientErrors))
	}
	add(HeaderReplayID, d.ReplayID)
	return r
}

// ErrMalformed is wrapped by Decode for a record that is not a delivery.
var ErrMalformed = errors.New("malformed delivery record")

// Decode reads a delivery record. The body is r.Value itself, not a copy;
// the strings it keeps are copied out of the record in one allocation.
func Decode(r *kgo.Record) (*Delivery, error) {
	s := copyValues(r)
	d := &Delivery{EndpointID: s[:len(r.Key)], Body: r.Value, Attempt: 1}
	off := len(r.Key)
	for _, h := range r.Headers {
		if !decoded(h.Key) {
			continue
		}
		v := s[off : off+len(h.Value)]
		off += len(h.Value)
		if err := d.set(h.Key, v); err != nil {
			return nil, fmt.Errorf("%w: header %s=%q: %v", ErrMalformed, h.Key, v, err)
		}
	}
	switch {
	case d.EndpointID == "":
		return nil, fmt.Errorf("%w: no endpoint id (key)", ErrMalformed)
	case d.EventID == "":
		return nil, fmt.Errorf("%w: no %s header", ErrMalformed, HeaderEventID)
	case len(d.Body) == 0:
		return nil, fmt.Errorf("%w: empty body", ErrMalformed)
	}
	if d.ID == "" {
		d.ID = ID(d.EventID, d.EndpointID)
	}
	return d, nil
}

// decoded reports whether Decode reads header key.
func decoded(key string) bool {
	switch key {
	case HeaderDeliveryID, HeaderEventID, HeaderEventType, HeaderEndpointID, HeaderAccount,
		HeaderEventCreated, HeaderAttempt, HeaderFirstAttempt, HeaderDueAt, HeaderLastStatus,
		HeaderLastError, HeaderClientErrors, HeaderReplayID:
		return true
	}
	return false
}

// copyValues returns r's key followed by the values of the headers Decode
// reads, in order, copied into one string.
func copyValues(r *kgo.Record) string {
	n := len(r.Key)
	for _, h := range r.Headers {
		if decoded(h.Key) {
			n += len(h.Value)
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.Write(r.Key)
	for _, h := range r.Headers {
		if decoded(h.Key) {
			b.Write(h.Value)
		}
	}
	return b.String()
}

// set reads the value v of header key into d.
func (d *Delivery) set(key, v string) error {
	var err error
	switch key {
	case HeaderDeliveryID:
		d.ID = v
	case HeaderEventID:
		d.EventID = v
	case HeaderEventType:
		d.EventType = v
	case HeaderEndpointID:
		if v != d.EndpointID {
			err = errors.New("differs from the record key")
		}
	case HeaderAccount:
		d.Account = v
	case HeaderEventCreated:
		d.EventCreated, err = time.Parse(time.RFC3339Nano, v)
	case HeaderAttempt:
		d.Attempt, err = strconv.Atoi(v)
		if err == nil && d.Attempt < 1 {
			err = errors.New("must be at least 1")
		}
	case HeaderFirstAttempt:
		d.FirstAttempt, err = time.Parse(time.RFC3339Nano, v)
	case HeaderDueAt:
		d.DueAt, err = time.Parse(time.RFC3339Nano, v)
	case HeaderLastStatus:
		d.LastStatus, err = strconv.Atoi(v)
	case HeaderLastError:
		d.LastError = v
	case HeaderClientErrors:
		d.ClientErrors, err = strconv.Atoi(v)
	case HeaderReplayID:
		d.ReplayID = v
	}
	return err
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
