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

	"github.com/hookd/hookd/producer/event"
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
	HeaderDeferrals    = "hookd-deferrals"     // deferrals in a row since the last attempt (no attempt spent)
	// HeaderTraceparent and HeaderTracestate carry the W3C trace context of
	// the router's fan-out span when tracing is on (internal/tracing); the
	// dispatcher's attempt spans are its children.
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
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
	// Deferrals counts the times in a row the dispatcher deferred the
	// delivery without an attempt (its endpoint's backlog was full, or
	// its account was over its fair share); an attempt resets it. The
	// first deferral waits on the first retry tier, the next ones on the
	// second (retrytiers.Policy.Defer).
	Deferrals int
	ReplayID  string
	// Traceparent and Tracestate are the W3C trace context the attempts
	// continue; empty when tracing was off at fan-out.
	Traceparent string
	Tracestate  string
	// Body is the exact JSON the endpoint receives.
	Body []byte
}

// ID returns the deterministic delivery id of (eventID, endpointID): a
// re-read of the same event yields the same delivery.
func ID(eventID, endpointID string) string {
	var scratch [256]byte // ids up to this size are hashed without an allocation
	h := sha256.Sum256(append(append(append(scratch[:0], eventID...), 0), endpointID...))
	var id [4 + 24]byte
	copy(id[:], "dlv_")
	hex.Encode(id[4:], h[:12])
	return string(id[:])
}

// body is the webhook payload of PRODUCT.md, in this field order.
type body struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Created string          `json:"created"`
	Data    json.RawMessage `json:"data"`
}

// Body renders the webhook body for an event. data must be valid JSON.
// The body is what json.Marshal makes of the body struct, byte for byte:
// data compacted, with <, >, & and U+2028, U+2029 escaped.
func Body(eventID, eventType string, created time.Time, data json.RawMessage) ([]byte, error) {
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if plain(eventID) && plain(eventType) && json.Valid(data) {
		return appendBody(eventID, eventType, created, data), nil
	}
	return marshalBody(eventID, eventType, created, data)
}

// EventBody is Body for an envelope that event.Parse accepted: its data
// is valid JSON by Parse's contract, so it is not validated again (the
// router's hot path). Ids and types that need JSON escapes take
// encoding/json, which would also report data that is not valid JSON
// after all.
func EventBody(env event.Envelope) ([]byte, error) {
	data := env.Data
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	if plain(env.ID) && plain(env.Type) {
		return appendBody(env.ID, env.Type, env.Created, data), nil
	}
	return marshalBody(env.ID, env.Type, env.Created, data)
}

// marshalBody is Body with encoding/json: the reference appendBody must
// match, and the path for escapes and for invalid data (its error).
func marshalBody(eventID, eventType string, created time.Time, data json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(body{ID: eventID, Type: eventType, Created: created.UTC().Format(time.RFC3339Nano), Data: data})
	if err != nil {
		return nil, fmt.Errorf("rendering webhook body: %w", err)
	}
	return b, nil
}

// appendBody renders the body into one buffer of the size it has when data
// is compact without HTML characters (the usual case). eventID and
// eventType must be plain, data valid JSON.
func appendBody(eventID, eventType string, created time.Time, data []byte) []byte {
	var scratch [64]byte
	ts := created.UTC().AppendFormat(scratch[:0], time.RFC3339Nano)
	const fixed = len(`{"id":"","type":"","created":"","data":}`)
	b := make([]byte, 0, fixed+len(eventID)+len(eventType)+len(ts)+len(data))
	b = append(b, `{"id":"`...)
	b = append(b, eventID...)
	b = append(b, `","type":"`...)
	b = append(b, eventType...)
	b = append(b, `","created":"`...)
	b = append(b, ts...)
	b = append(b, `","data":`...)
	b = appendCompact(b, data)
	return append(b, '}')
}

// plain reports whether encoding/json writes s as it is between quotes:
// printable ASCII without '"', '\\' or the HTML characters it escapes.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c > '~', c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// appendCompact appends the valid JSON src as json.Marshal writes a
// json.RawMessage: without whitespace outside strings, with <, >, & and
// U+2028, U+2029 escaped. Invalid JSON yields garbage, never a panic.
func appendCompact(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	start, inString, grown := 0, false, false
	for i := 0; i < len(src); i++ {
		for i < len(src) && !special[src[i]] {
			i++
		}
		if i == len(src) {
			break
		}
		switch c := src[i]; {
		case inString && c == '\\':
			i++ // the escaped character is ASCII: '"' or another that needs no care
		case c == '"':
			inString = !inString
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if !inString {
				dst = append(dst, src[start:i]...)
				start = i + 1
			}
		case c == '<' || c == '>' || c == '&':
			if !grown {
				dst, grown = growForEscapes(dst, src[start:]), true
			}
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			if !grown {
				dst, grown = growForEscapes(dst, src[start:]), true
			}
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			i += 2
			start = i + 1
		}
	}
	return append(dst, src[start:]...)
}

// special are the bytes appendCompact looks at.
var special = func() (t [256]bool) {
	for _, c := range []byte("\"\\ \t\n\r<>&\xe2") {
		t[c] = true
	}
	return t
}()

// growForEscapes makes room for the data not yet appended, rest, with its
// escapes: each makes 3 bytes (U+2028, U+2029) or 1 byte (<, >, &) 6.
func growForEscapes(dst, rest []byte) []byte {
	extra := 0
	for i, c := range rest {
		switch {
		case c == '<' || c == '>' || c == '&':
			extra += 5
		case c == 0xE2 && i+2 < len(rest) && rest[i+1] == 0x80 && rest[i+2]&^1 == 0xA8:
			extra += 3
		}
	}
	b := make([]byte, len(dst), len(dst)+len(rest)+extra+1) // +1: the body's closing brace
	copy(b, dst)
	return b
}

// Record encodes d for topic. The key and the header values share one
// buffer, each value capped at its length.
func (d *Delivery) Record(topic string) *kgo.Record {
	n, size := d.headerCount()
	buf := make([]byte, 0, len(d.EndpointID)+size)
	buf = append(buf, d.EndpointID...)
	w := headerWriter{r: &kgo.Record{Topic: topic, Key: buf[:len(buf):len(buf)], Value: d.Body,
		Headers: make([]kgo.RecordHeader, 0, n)}, buf: buf}
	w.str(HeaderDeliveryID, d.ID)
	w.str(HeaderEventID, d.EventID)
	w.str(HeaderEventType, d.EventType)
	w.str(HeaderEndpointID, d.EndpointID)
	w.str(HeaderAccount, d.Account)
	w.time(HeaderEventCreated, d.EventCreated)
	w.int(HeaderAttempt, max(d.Attempt, 1))
	w.time(HeaderFirstAttempt, d.FirstAttempt)
	w.time(HeaderDueAt, d.DueAt)
	if d.LastStatus != 0 {
		w.int(HeaderLastStatus, d.LastStatus)
	}
	w.str(HeaderLastError, d.LastError)
	if d.ClientErrors != 0 {
		w.int(HeaderClientErrors, d.ClientErrors)
	}
	if d.Deferrals != 0 {
		w.int(HeaderDeferrals, d.Deferrals)
	}
	w.str(HeaderReplayID, d.ReplayID)
	w.str(HeaderTraceparent, d.Traceparent)
	w.str(HeaderTracestate, d.Tracestate)
	return w.r
}

// headerCount returns the number of headers Record writes and an upper
// bound of their values' total size.
func (d *Delivery) headerCount() (n, size int) {
	for _, s := range [...]string{d.ID, d.EventID, d.EventType, d.EndpointID, d.Account, d.LastError, d.ReplayID, d.Traceparent, d.Tracestate} {
		if s != "" {
			n++
			size += len(s)
		}
	}
	for _, t := range [...]time.Time{d.EventCreated, d.FirstAttempt, d.DueAt} {
		if !t.IsZero() {
			n++
			size += len(time.RFC3339Nano) + 6 // the longest, with a 5-digit year and -07:00 as Z
		}
	}
	for _, i := range [...]int{1, d.LastStatus, d.ClientErrors, d.Deferrals} { // 1: the attempt, always there
		if i != 0 {
			n++
			size += 20
		}
	}
	return n, size
}

// headerWriter appends headers to r, their values to buf.
type headerWriter struct {
	r   *kgo.Record
	buf []byte
}

func (w *headerWriter) str(key, v string) {
	if v != "" {
		start := len(w.buf)
		w.buf = append(w.buf, v...)
		w.add(key, start)
	}
}

func (w *headerWriter) time(key string, t time.Time) {
	if !t.IsZero() {
		start := len(w.buf)
		w.buf = t.UTC().AppendFormat(w.buf, time.RFC3339Nano)
		w.add(key, start)
	}
}

func (w *headerWriter) int(key string, i int) {
	start := len(w.buf)
	w.buf = strconv.AppendInt(w.buf, int64(i), 10)
	w.add(key, start)
}

// add adds the header key with the value buf[start:]. Values are capped:
// appending to one never overwrites the next.
func (w *headerWriter) add(key string, start int) {
	w.r.Headers = append(w.r.Headers, kgo.RecordHeader{Key: key, Value: w.buf[start:len(w.buf):len(w.buf)]})
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
		HeaderLastError, HeaderClientErrors, HeaderDeferrals, HeaderReplayID, HeaderTraceparent, HeaderTracestate:
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
	case HeaderDeferrals:
		d.Deferrals, err = strconv.Atoi(v)
		if err == nil && d.Deferrals < 0 {
			err = errors.New("must not be negative")
		}
	case HeaderReplayID:
		d.ReplayID = v
	case HeaderTraceparent:
		d.Traceparent = v
	case HeaderTracestate:
		d.Tracestate = v
	}
	return err
}
