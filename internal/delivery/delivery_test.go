package delivery_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 30, 1, 2, 3, 456, time.UTC)
	b, err := delivery.Body("evt_1", "invoice.paid", created, json.RawMessage(`{"invoice":"in_1"}`))
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"evt_1","type":"invoice.paid","created":"2026-11-30T01:02:03.000000456Z","data":{"invoice":"in_1"}}`, string(b))

	in := &delivery.Delivery{
		ID: delivery.ID("evt_1", "ep_1"), EventID: "evt_1", EventType: "invoice.paid", EndpointID: "ep_1",
		Account: "acct_1", EventCreated: created, Attempt: 3, FirstAttempt: created.Add(time.Second),
		DueAt: created.Add(time.Minute), LastStatus: 503, LastError: "http_5xx", ClientErrors: 1, Deferrals: 2,
		ReplayID: "rpl_1", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Tracestate: "k=v", Body: b,
	}
	rec := in.Record("webhooks.retry.30s")
	require.Equal(t, "ep_1", string(rec.Key))
	require.Equal(t, b, rec.Value)
	out, err := delivery.Decode(rec)
	require.NoError(t, err)
	require.Equal(t, in, out)
}

func TestIDIsDeterministic(t *testing.T) {
	t.Parallel()
	require.Equal(t, delivery.ID("e", "p"), delivery.ID("e", "p"))
	require.NotEqual(t, delivery.ID("e", "p"), delivery.ID("e", "q"))
	require.NotEqual(t, delivery.ID("ab", "c"), delivery.ID("a", "bc"))
}

func TestDecodeRejectsMalformed(t *testing.T) {
	t.Parallel()
	ok := (&delivery.Delivery{EventID: "e", EndpointID: "p", Body: []byte(`{}`)}).Record("t")
	cases := map[string]func(r *kgo.Record){
		"no key":      func(r *kgo.Record) { r.Key = nil },
		"no event id": func(r *kgo.Record) { r.Headers = r.Headers[:0] },
		"empty body":  func(r *kgo.Record) { r.Value = nil },
		"bad attempt": func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: delivery.HeaderAttempt, Value: []byte("zero")})
		},
		"negative deferrals": func(r *kgo.Record) {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: delivery.HeaderDeferrals, Value: []byte("-1")})
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			r := *ok
			r.Headers = append([]kgo.RecordHeader(nil), ok.Headers...)
			mutate(&r)
			_, err := delivery.Decode(&r)
			require.ErrorIs(t, err, delivery.ErrMalformed)
		})
	}
}

// TestDecodeAllocations: Decode copies the strings it keeps out of the
// record in one allocation, beside the Delivery itself, and parses the
// other headers without copies. Copies they are: a record's buffers may
// be reused once decoded.
func TestDecodeAllocations(t *testing.T) {
	created := time.Date(2026, 11, 30, 1, 2, 3, 456, time.UTC)
	in := &delivery.Delivery{
		ID: delivery.ID("evt_1", "ep_1"), EventID: "evt_1", EventType: "invoice.paid", EndpointID: "ep_1",
		Account: "acct_1", EventCreated: created, Attempt: 3, FirstAttempt: created.Add(time.Second),
		DueAt: created.Add(time.Minute), LastStatus: 503, LastError: "http_5xx", ClientErrors: 1, ReplayID: "rpl_1",
		Body: []byte(`{}`),
	}
	rec := in.Record("webhooks.retry.30s")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := delivery.Decode(rec); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, 2.0, "allocations per Decode")

	out, err := delivery.Decode(rec)
	require.NoError(t, err)
	rec.Key[0] = 'X'
	for _, h := range rec.Headers {
		for i := range h.Value {
			h.Value[i] = 'X'
		}
	}
	require.Equal(t, in, out, "decoded strings do not share the record's bytes")
}

// FuzzDecodeRoundTrip: the one codec of the hookd-* headers. A delivery
// written by Record is read back the same by Decode; and whatever record
// Decode accepts (any key, headers and body) is written by Record so that
// Decode reads the same delivery again.
func FuzzDecodeRoundTrip(f *testing.F) {
	created := time.Date(2026, 11, 30, 1, 2, 3, 456, time.UTC).UnixNano()
	f.Add("evt_1", "invoice.paid", "ep_1", "acct_1", created, 1, int64(0), int64(0), 0, "", 0, 0, "", []byte(`{}`), "hookd-attempt", "2")
	f.Add("evt_1", "t", "ep_1", "a", created, 3, created+1e9, created+6e10, 503, "http_5xx", 1, 2, "rpl_1", []byte(`{"a":1}`), "hookd-due-at", "x")
	f.Add("e", "", "p", "", int64(-1), 7, int64(1), int64(-1), -1, "x\x00y", 9, 0, "r", []byte("b"), "hookd-deferrals", "-1")
	f.Fuzz(func(t *testing.T, eventID, eventType, endpointID, account string, createdNanos int64, attempt int,
		firstNanos, dueNanos int64, lastStatus int, lastError string, clientErrors, deferrals int, replayID string,
		body []byte, extraKey, extraValue string) {
		at := func(n int64) time.Time {
			if n == 0 {
				return time.Time{}
			}
			return time.Unix(0, n).UTC()
		}
		in := &delivery.Delivery{ID: delivery.ID(eventID, endpointID), EventID: eventID, EventType: eventType,
			EndpointID: endpointID, Account: account, EventCreated: at(createdNanos), Attempt: attempt,
			FirstAttempt: at(firstNanos), DueAt: at(dueNanos), LastStatus: lastStatus, LastError: lastError,
			ClientErrors: clientErrors, Deferrals: deferrals, ReplayID: replayID, Body: body}
		rec := in.Record("t")
		out, err := delivery.Decode(rec)
		valid := eventID != "" && endpointID != "" && len(body) > 0 && attempt >= 1 && deferrals >= 0
		if valid {
			require.NoError(t, err)
			require.Equal(t, in, out)
		}

		// Any record: what Decode accepts survives Record and Decode.
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: extraKey, Value: []byte(extraValue)})
		first, err := delivery.Decode(rec)
		if err != nil {
			return
		}
		again, err := delivery.Decode(first.Record("t"))
		require.NoError(t, err, "a decoded delivery written again")
		require.Equal(t, first, again)
	})
}
