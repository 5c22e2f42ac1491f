// Package deadletter owns the format of records on the dead-letter topic
// (webhooks.dlq): the original record's key and value, unchanged, with its
// own headers kept, plus provenance headers whose names are the exported
// constants below. A record that is too large (or otherwise impossible) to
// keep is dead-lettered as a Summary instead: a small JSON value and
// summary headers, never the original value. It builds and reads those
// records; it never produces, consumes or decides that something is dead.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package deadletter

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Provenance headers added to every dead-lettered record. They are part of
// hookd's public contract (operators read them with kcat and hookctl dlq).
const (
	// HeaderOriginTopic is the topic the record was read from when it died.
	HeaderOriginTopic = "hookd-dlq-origin-topic"
	// HeaderOriginPartition is that record's partition (decimal).
	HeaderOriginPartition = "hookd-dlq-origin-partition"
	// HeaderOriginOffset is that record's offset (decimal).
	HeaderOriginOffset = "hookd-dlq-origin-offset"
	// HeaderAttempts is how many HTTP attempts were made in all (decimal).
	HeaderAttempts = "hookd-dlq-attempts"
	// HeaderFirstAttempt is the RFC 3339 time of the first attempt, if any.
	HeaderFirstAttempt = "hookd-dlq-first-attempt"
	// HeaderLastAttempt is the RFC 3339 time of the last attempt, if any.
	HeaderLastAttempt = "hookd-dlq-last-attempt"
	// HeaderLastStatus is the HTTP status of the last attempt, if any.
	HeaderLastStatus = "hookd-dlq-last-status"
	// HeaderErrorClass is the error class of the last attempt (http_5xx,
	// timeout, ssrf_refused, ...), if any.
	HeaderErrorClass = "hookd-dlq-error-class"
	// HeaderReason is why the record was dead-lettered: one of the Reason
	// constants.
	HeaderReason = "hookd-dlq-reason"
	// HeaderDeadAt is the RFC 3339 time the record was dead-lettered.
	HeaderDeadAt = "hookd-dlq-dead-at"
)

// Summary headers, on dead letters that carry a Summary instead of the
// original value (see SummaryRecord).
const (
	// HeaderOutboxID is the webhooks.outbox row id of an outbox event.
	HeaderOutboxID = "hookd-dlq-outbox-id"
	// HeaderEventID is the event id, when known.
	HeaderEventID = "hookd-dlq-event-id"
	// HeaderAccount is the event's account, when known.
	HeaderAccount = "hookd-dlq-account"
	// HeaderEventType is the event's type, when known.
	HeaderEventType = "hookd-dlq-event-type"
	// HeaderSize is the size in bytes of the value that was not kept.
	HeaderSize = "hookd-dlq-size"
	// HeaderLimit is the size limit that value exceeded, if one did.
	HeaderLimit = "hookd-dlq-limit"
	// HeaderDetail is one line saying what went wrong.
	HeaderDetail = "hookd-dlq-detail"
)

// Reasons a record is dead-lettered.
const (
	ReasonRetriesExhausted = "retries_exhausted" // the last retry tier failed too
	ReasonEndpointGone     = "endpoint_gone"     // the endpoint answered 410
	ReasonClientError      = "client_error"      // 3 consistent 4xx answers
	ReasonSSRFRefused      = "ssrf_refused"      // the destination is a forbidden address
	ReasonEndpointDisabled = "endpoint_disabled" // the endpoint is disabled
	ReasonEndpointDeleted  = "endpoint_deleted"  // the endpoint no longer exists
	ReasonAccountMismatch  = "account_mismatch"  // the record's account is not the endpoint's account
	ReasonInvalidSecret    = "invalid_secret"    // the endpoint's signing secret cannot be used
	ReasonInvalidURL       = "invalid_url"       // the endpoint's URL cannot be requested
	ReasonMalformed        = "malformed_record"  // the record is not a valid delivery
	ReasonInvalidEnvelope  = "invalid_envelope"  // an event envelope could not be read
	ReasonOversize         = "oversize"          // an outbox row's envelope exceeds the envelope limit (a Summary)
	ReasonUnpublishable    = "unpublishable"     // Kafka refused an outbox row's envelope for good, e.g. MESSAGE_TOO_LARGE (a Summary)
)

// Provenance is what a dead-lettered record says about its life.
type Provenance struct {
	OriginTopic     string
	OriginPartition int32
	OriginOffset    int64
	Attempts        int
	FirstAttempt    time.Time
	LastAttempt     time.Time
	LastStatus      int
	ErrorClass      string
	Reason          string
	DeadAt          time.Time
}

// Record builds the dead-letter record of src for topic: src's key, value
// and headers (stale provenance headers dropped) plus p's headers. The value
// slice is shared with src, never copied nor re-encoded. The partition is
// src's, so the dead letter stays on the partition number of its endpoint.
func Record(topic string, src *kgo.Record, p Provenance) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: src.Partition, Key: src.Key, Value: src.Value}
	r.Headers = make([]kgo.RecordHeader, 0, len(src.Headers)+10)
	for _, h := range src.Headers {
		if !isProvenance(h.Key) {
			r.Headers = append(r.Headers, h)
		}
	}
	r.Headers = appendProvenance(r.Headers, p)
	return r
}

// appendProvenance appends p's headers to h; the origin partition and
// offset only with an origin topic.
func appendProvenance(h []kgo.RecordHeader, p Provenance) []kgo.RecordHeader {
	add := func(k, v string) {
		if v != "" {
			h = append(h, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderOriginTopic, p.OriginTopic)
	if p.OriginTopic != "" {
		add(HeaderOriginPartition, strconv.FormatInt(int64(p.OriginPartition), 10))
		add(HeaderOriginOffset, strconv.FormatInt(p.OriginOffset, 10))
	}
	add(HeaderAttempts, strconv.Itoa(p.Attempts))
	add(HeaderFirstAttempt, formatTime(p.FirstAttempt))
	add(HeaderLastAttempt, formatTime(p.LastAttempt))
	if p.LastStatus != 0 {
		add(HeaderLastStatus, strconv.Itoa(p.LastStatus))
	}
	add(HeaderErrorClass, p.ErrorClass)
	add(HeaderReason, p.Reason)
	add(HeaderDeadAt, formatTime(p.DeadAt))
	return h
}

// Summary stands for a record dead-lettered without its value (too large
// to keep, or never written to Kafka at all). Text fields are clipped to
// 512 bytes, so a summary record stays small whatever it describes.
type Summary struct {
	// OutboxID is the webhooks.outbox row id, for an outbox event.
	OutboxID string `json:"outbox_id,omitempty"`
	// EventID, Account and EventType describe the event, when known.
	EventID   string `json:"event_id,omitempty"`
	Account   string `json:"account,omitempty"`
	EventType string `json:"event_type,omitempty"`
	// Created is the event's creation time, when known.
	Created time.Time `json:"created,omitzero"`
	// Size is the size in bytes of the value that was not kept.
	Size int `json:"size"`
	// Limit is the limit Size exceeded, if one did.
	Limit int `json:"limit,omitempty"`
	// Detail is one line saying what went wrong.
	Detail string `json:"detail,omitempty"`
}

const clipBytes = 512

func clip(s string) string {
	if len(s) <= clipBytes {
		return s
	}
	return strings.ToValidUTF8(s[:clipBytes], "") + "..."
}

// SummaryRecord builds a dead letter for topic that stands for a record it
// does not contain: key as given, the value s as a JSON object (with the
// reason), s in the summary headers and p in the provenance headers.
func SummaryRecord(topic string, key []byte, s Summary, p Provenance) *kgo.Record {
	s.OutboxID, s.EventID, s.Account, s.EventType, s.Detail = clip(s.OutboxID), clip(s.EventID), clip(s.Account), clip(s.EventType), clip(s.Detail)
	value, _ := json.Marshal(struct {
		Reason string `json:"reason"`
		Summary
	}{p.Reason, s}) // cannot fail: strings, a time and ints
	r := &kgo.Record{Topic: topic, Key: key, Value: value, Headers: make([]kgo.RecordHeader, 0, 16)}
	add := func(k, v string) {
		if v != "" {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	add(HeaderOutboxID, s.OutboxID)
	add(HeaderEventID, s.EventID)
	add(HeaderAccount, s.Account)
	add(HeaderEventType, s.EventType)
	add(HeaderSize, strconv.Itoa(s.Size))
	if s.Limit > 0 {
		add(HeaderLimit, strconv.Itoa(s.Limit))
	}
	add(HeaderDetail, s.Detail)
	r.Headers = appendProvenance(r.Headers, p)
	return r
}

// ReadSummary returns the Summary a SummaryRecord carries in its value.
func ReadSummary(r *kgo.Record) (Summary, error) {
	var s Summary
	if err := json.Unmarshal(r.Value, &s); err != nil {
		return s, fmt.Errorf("dead-letter summary: %w", err)
	}
	return s, nil
}

func isProvenance(k string) bool {
	switch k {
	case HeaderOriginTopic, HeaderOriginPartition, HeaderOriginOffset, HeaderAttempts, HeaderFirstAttempt,
		HeaderLastAttempt, HeaderLastStatus, HeaderErrorClass, HeaderReason, HeaderDeadAt,
		HeaderOutboxID, HeaderEventID, HeaderAccount, HeaderEventType, HeaderSize, HeaderLimit, HeaderDetail:
		return true
	}
	return false
}

// Read returns the provenance headers of a dead-letter record.
func Read(r *kgo.Record) (Provenance, error) {
	var p Provenance
	for _, h := range r.Headers {
		v := string(h.Value)
		var err error
		switch h.Key {
		case HeaderOriginTopic:
			p.OriginTopic = v
		case HeaderOriginPartition:
			var n int64
			n, err = strconv.ParseInt(v, 10, 32)
			p.OriginPartition = int32(n)
		case HeaderOriginOffset:
			p.OriginOffset, err = strconv.ParseInt(v, 10, 64)
		case HeaderAttempts:
			p.Attempts, err = strconv.Atoi(v)
		case HeaderFirstAttempt:
			p.FirstAttempt, err = time.Parse(time.RFC3339Nano, v)
		case HeaderLastAttempt:
			p.LastAttempt, err = time.Parse(time.RFC3339Nano, v)
		case HeaderLastStatus:
			p.LastStatus, err = strconv.Atoi(v)
		case HeaderErrorClass:
			p.ErrorClass = v
		case HeaderReason:
			p.Reason = v
		case HeaderDeadAt:
			p.DeadAt, err = time.Parse(time.RFC3339Nano, v)
		}
		if err != nil {
			return p, fmt.Errorf("dead-letter header %s=%q: %w", h.Key, v, err)
		}
	}
	if p.Reason == "" {
		return p, fmt.Errorf("dead-letter record has no %s header", HeaderReason)
	}
	return p, nil
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
