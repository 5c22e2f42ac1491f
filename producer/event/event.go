// Package event owns the ingress event envelope that producers write to
// webhooks.events ({"id","account","type","data","created"}): its parsing
// and validation with machine-readable reasons, the deterministic id given
// to an envelope that has none, and its encoding. Input is untrusted: it
// never panics on bad bytes and never does I/O.
//
// Applications may import this package: it is part of hookd's supported Go API.
package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Envelope is one valid event.
type Envelope struct {
	// ID is the event id, the webhook-id receivers dedupe on.
	ID string
	// Account owns the event; only its endpoints receive it.
	Account string
	// Type is the event type, e.g. invoice.paid.
	Type string
	// Data is the event payload: a JSON object, "{}" when absent.
	Data json.RawMessage
	// Created is when the event happened.
	Created time.Time
}

// Reason says why an envelope is invalid. Reasons are part of hookd's
// public contract: they appear in the dead-letter headers.
type Reason string

// Reasons for rejecting an envelope.
const (
	ReasonInvalidJSON    Reason = "invalid_json"    // not JSON, or not a JSON object
	ReasonOversize       Reason = "oversize"        // larger than the configured limit
	ReasonMissingAccount Reason = "missing_account" // no account, or an empty one
	ReasonMissingType    Reason = "missing_type"    // no type, or an empty one
	ReasonInvalidID      Reason = "invalid_id"      // id not a string of printable ASCII without spaces, or too long
	ReasonInvalidAccount Reason = "invalid_account" // account not a string of printable ASCII without spaces, or too long
	ReasonInvalidType    Reason = "invalid_type"    // type not a string of printable ASCII without spaces or '*', or too long
	ReasonInvalidData    Reason = "invalid_data"    // data present but not a JSON object, or not RFC 8259 text (bytes that are not UTF-8, an unpaired surrogate escape)
	ReasonInvalidCreated Reason = "invalid_created" // created not an RFC 3339 string, or outside years 0000..9999 in UTC
	// ReasonSchemaViolation: data does not match its type's JSON Schema in
	// the event-type catalogue. Only the router reports it, and only with
	// schema validation on (hookd router --validate-event-schemas).
	ReasonSchemaViolation Reason = "schema_violation"
)

// Limits of the envelope's fields.
const (
	// DefaultMaxBytes is the default limit of an envelope's size.
	DefaultMaxBytes = 256 << 10
	// MaxIDLen, MaxAccountLen and MaxTypeLen bound those fields.
	MaxIDLen      = 255
	MaxAccountLen = 255
	MaxTypeLen    = 255
)

// ErrInvalid is matched (errors.Is) by every *InvalidError.
var ErrInvalid = errors.New("invalid event envelope")

// InvalidError is a rejected envelope.
type InvalidError struct {
	Reason Reason
	// Detail is one human-readable line.
	Detail string
}

func (e *InvalidError) Error() string { return string(e.Reason) + ": " + e.Detail }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(r Reason, format string, args ...any) *InvalidError {
	return &InvalidError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// Origin is where an envelope was read from. It gives a missing id and a
// missing created time deterministic values: a re-read of the same record
// yields the same event.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the record's timestamp, used when created is absent.
	Timestamp time.Time
}

// DeriveID returns the id of an envelope that has none: "evt_" and 32 hex
// characters of a hash of the record's topic, partition, offset and
// timestamp (the timestamp keeps ids apart if a topic is ever recreated and
// its offsets restart).
func DeriveID(o Origin) string {
	h := sha256.New()
	h.Write([]byte(o.Topic))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, int64(o.Partition), 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, o.Offset, 10))
	h.Write([]byte{0})
	h.Write(strconv.AppendInt(nil, o.Timestamp.UnixMilli(), 10))
	return "evt_" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Parse validates raw envelope bytes read from o. maxBytes <= 0 means
// DefaultMaxBytes. A rejected envelope yields an *InvalidError.
func Parse(raw []byte, o Origin, maxBytes int) (Envelope, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	var env Envelope
	if len(raw) > maxBytes {
		return env, invalid(ReasonOversize, "envelope is %d bytes, the limit is %d", len(raw), maxBytes)
	}
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return env, invalid(ReasonInvalidJSON, "envelope is not a JSON object")
	}
	if env, ok := parseFast(trimmed, o); ok {
		return env, nil
	}
	return parseGeneral(trimmed, o)
}

// parseGeneral is Parse with encoding/json, for any envelope that starts
// with '{': the reference that parseFast must agree with, and the only
// path that words the errors.
func parseGeneral(trimmed []byte, o Origin) (Envelope, error) {
	var env Envelope
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &fields); err != nil {
		return env, invalid(ReasonInvalidJSON, "envelope is not valid JSON: %s", jsonError(err))
	}

	var err *InvalidError
	if env.Account, err = stringField(fields, "account", ReasonMissingAccount, ReasonInvalidAccount, MaxAccountLen); err != nil {
		return env, err
	}
	if env.Type, err = stringField(fields, "type", ReasonMissingType, ReasonInvalidType, MaxTypeLen); err != nil {
		return env, err
	}
	if bytes.IndexByte([]byte(env.Type), '*') >= 0 {
		return env, invalid(ReasonInvalidType, "type %q must not contain '*'", env.Type)
	}
	if env.ID, err = stringField(fields, "id", "", ReasonInvalidID, MaxIDLen); err != nil {
		return env, err
	}
	if env.ID == "" {
		env.ID = DeriveID(o)
	}

	switch d := fields["data"]; {
	case isNull(d):
		env.Data = json.RawMessage("{}")
	case d[0] != '{':
		return env, invalid(ReasonInvalidData, "data must be a JSON object")
	default:
		if why := dataIssue(d); why != "" {
			return env, invalid(ReasonInvalidData, "%s", why)
		}
		env.Data = d
	}

	switch c := fields["created"]; {
	case isNull(c):
		env.Created = o.Timestamp
		if env.Created.IsZero() {
			env.Created = time.Now()
		}
	default:
		var s string
		if json.Unmarshal(c, &s) != nil {
			return env, invalid(ReasonInvalidCreated, "created must be an RFC 3339 string")
		}
		t, perr := time.Parse(time.RFC3339Nano, s)
		if perr != nil {
			return env, invalid(ReasonInvalidCreated, "created %q is not RFC 3339", truncate(s, 64))
		}
		env.Created = t
	}
	env.Created = env.Created.UTC()
	if y := env.Created.Year(); y < 0 || y > 9999 {
		// RFC 3339 has four-digit years: such a time could not be written
		// back into an envelope, a body or a webhook-timestamp.
		return env, invalid(ReasonInvalidCreated, "created (or, without it, the record timestamp) %s is outside years 0000..9999 in UTC",
			env.Created.Format(time.RFC3339Nano))
	}
	return env, nil
}

// stringField reads fields[name] as a token of printable ASCII without
// spaces. An absent, null or empty value is missing (an error only when
// missing is not "").
func stringField(fields map[string]json.RawMessage, name string, missing, bad Reason, maxLen int) (string, *InvalidError) {
	raw := fields[name]
	if isNull(raw) {
		if missing != "" {
			return "", invalid(missing, "%s is missing", name)
		}
		return "", nil
	}
	var s string
	if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid(bad, "%s must be a string", name)
	}
	if s == "" {
		if missing != "" {
			return "", invalid(missing, "%s is empty", name)
		}
		return "", nil
	}
	if len(s) > maxLen {
		return "", invalid(bad, "%s is %d bytes, the limit is %d", name, len(s), maxLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return "", invalid(bad, "%s %q must be printable ASCII without spaces", name, truncate(s, 64))
		}
	}
	return s, nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func jsonError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	return err.Error()
}

type wire struct {
	ID      string          `json:"id,omitempty"`
	Account string          `json:"account"`
	Type    string          `json:"type"`
	Data    json.RawMessage `json:"data"`
	Created string          `json:"created,omitempty"`
}

// Marshal encodes e as an envelope that Parse accepts. Data must be a JSON
// object (or empty, meaning {}). Data that cannot be encoded at all (not
// JSON, or nested deeper than encoding/json's 10000 levels) is an
// *InvalidError with the reason Parse gives the same envelope, invalid_json:
// encoding it again can never succeed.
func Marshal(e Envelope) ([]byte, error) {
	if b, ok := marshalFast(e); ok {
		return b, nil
	}
	return marshalGeneral(e)
}

// marshalGeneral is Marshal with encoding/json: the reference that
// marshalFast must agree with byte for byte, and the only path that words
// the errors.
func marshalGeneral(e Envelope) ([]byte, error) {
	w := wire{ID: e.ID, Account: e.Account, Type: e.Type, Data: e.Data}
	if len(w.Data) == 0 {
		w.Data = json.RawMessage("{}")
	}
	if !e.Created.IsZero() {
		w.Created = e.Created.UTC().Format(time.RFC3339Nano)
	}
	b, err := json.Marshal(w)
	if err != nil {
		// Strings and a time always encode: data is the culprit. (A syntax
		// error's offset is not data's: leave it out.)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			err = se
		}
		return nil, invalid(ReasonInvalidJSON, "encoding envelope %s: data: %s", truncate(e.ID, 64), err.Error())
	}
	return b, nil
}
