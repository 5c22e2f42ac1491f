package delivery

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// recordReference is Record as it was before it shared one buffer: the
// wire format Record must keep.
func recordReference(d *Delivery, topic string) *kgo.Record {
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
	if d.Deferrals != 0 {
		add(HeaderDeferrals, strconv.Itoa(d.Deferrals))
	}
	add(HeaderReplayID, d.ReplayID)
	add(HeaderTraceparent, d.Traceparent)
	add(HeaderTracestate, d.Tracestate)
	return r
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func idReference(eventID, endpointID string) string {
	h := sha256.Sum256([]byte(eventID + "\x00" + endpointID))
	return "dlv_" + hex.EncodeToString(h[:12])
}

// FuzzRecord: Record writes the same key and headers as before, and ID
// the same id.
func FuzzRecord(f *testing.F) {
	created := time.Date(2026, 11, 30, 1, 2, 3, 456, time.UTC).UnixNano()
	f.Add("evt_1", "invoice.paid", "ep_1", "acct_1", created, 1, int64(0), int64(0), 0, "", 0, 0, "", "")
	f.Add("evt_1", "t", "ep_1", "a", created, 3, created+1e9, created+6e10, 503, "http_5xx", 1, 2, "rpl_1",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("", "", "", "", int64(0), -5, int64(-1), int64(1), -1, "x", -7, -3, "r", "x")
	f.Add(strings.Repeat("e", 300), "t", "ep", "a", int64(-62167219200000000), 0, int64(0), int64(0), 0, "", 0, 0, "", "")
	f.Fuzz(func(t *testing.T, eventID, eventType, endpointID, account string, createdNanos int64, attempt int,
		firstNanos, dueNanos int64, lastStatus int, lastError string, clientErrors, deferrals int, replayID, traceparent string) {
		at := func(n int64) time.Time {
			if n == 0 {
				return time.Time{}
			}
			return time.Unix(0, n).In(time.FixedZone("X", 3600))
		}
		d := &Delivery{ID: ID(eventID, endpointID), EventID: eventID, EventType: eventType, EndpointID: endpointID, Account: account,
			EventCreated: at(createdNanos), Attempt: attempt, FirstAttempt: at(firstNanos), DueAt: at(dueNanos),
			LastStatus: lastStatus, LastError: lastError, ClientErrors: clientErrors, Deferrals: deferrals, ReplayID: replayID,
			Traceparent: traceparent, Tracestate: replayID, Body: []byte(`{}`)}
		if want := idReference(eventID, endpointID); d.ID != want {
			t.Fatalf("ID(%q, %q) = %s, want %s", eventID, endpointID, d.ID, want)
		}
		got, want := d.Record("t"), recordReference(d, "t")
		if len(want.Key) == 0 {
			want.Key = got.Key[:0:0] // []byte("") is empty, not nil, either way
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Record = %+v, want %+v", got, want)
		}
	})
}

// TestRecordAllocations: the record, its headers and one buffer for the
// key and the header values.
func TestRecordAllocations(t *testing.T) {
	d := &Delivery{ID: ID("evt_1", "ep_1"), EventID: "evt_1", EventType: "invoice.paid", EndpointID: "ep_1", Account: "acct_1",
		EventCreated: time.Date(2026, 11, 30, 1, 2, 3, 456, time.UTC), Attempt: 1, Body: []byte(`{}`)}
	allocs := testing.AllocsPerRun(100, func() { _ = d.Record("t") })
	if allocs > 3 {
		t.Fatalf("%v allocations per Record, want at most 3", allocs)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = ID("evt_1", "ep_1") }); allocs > 1 {
		t.Fatalf("%v allocations per ID, want 1", allocs)
	}
}

// TestRecordValuesCapped: the header values share a buffer, yet appending
// to one (as a consumer adding to a record might) leaves the next intact.
func TestRecordValuesCapped(t *testing.T) {
	r := (&Delivery{ID: "d", EventID: "e", EndpointID: "p", Body: []byte(`{}`)}).Record("t")
	_ = append(r.Key, "XX"...)
	_ = append(r.Headers[0].Value, "XX"...)
	if string(r.Key) != "p" || string(r.Headers[1].Value) != "e" || string(r.Headers[2].Value) != "p" {
		t.Fatalf("key %q, headers %+v", r.Key, r.Headers)
	}
}
