package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/producer/router"
)

// envelopeOf returns a valid-looking envelope of exactly n bytes.
func envelopeOf(id string, n int) string {
	head := fmt.Sprintf(`{"id":%q,"account":"acct_1","type":"invoice.paid","data":{"x":"`, id)
	return head + strings.Repeat("a", n-len(head)-3) + `"}}`
}

// TestOversizeEnvelopeIsDeadLetteredAsSummary: envelopes over the limit are
// dead-lettered (reason invalid_envelope, class oversize) as a summary
// pointing at their origin offset, not as a copy: one just under the
// broker's record limit would not fit a record batch with the dead-letter
// headers added, and the router would retry it forever. Events after them
// are fanned out.
func TestOversizeEnvelopeIsDeadLetteredAsSummary(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_1", "acct_1", endpoint.StatusActive)
	e.startRouter(t)

	const near = 999_800 // fits a producer's 1,000,012-byte batch alone, not with ~300 bytes of headers
	e.produce(t, envelopeOf("evt_300k", 300<<10), envelopeOf("evt_near", near),
		envelopeOf("evt_at_limit", event.DefaultMaxBytes), `{"id":"evt_ok","account":"acct_1","type":"invoice.paid"}`)

	recs := consume(t, e.kafka, e.names.Deliveries, 2, 20*time.Second)
	var fanned []string
	for _, r := range recs {
		d, err := delivery.Decode(r)
		require.NoError(t, err)
		fanned = append(fanned, d.EventID)
	}
	require.ElementsMatch(t, []string{"evt_at_limit", "evt_ok"}, fanned, "the router went on past the oversize envelopes")

	dlq := consume(t, e.kafka, e.names.DLQ, 2, 10*time.Second)
	require.Len(t, dlq, 2)
	for i, want := range []struct {
		id   string
		size int
	}{{"evt_300k", 300 << 10}, {"evt_near", near}} {
		r := dlq[i]
		p, err := deadletter.Read(r)
		require.NoError(t, err)
		require.Equal(t, deadletter.ReasonInvalidEnvelope, p.Reason)
		require.Equal(t, "oversize", p.ErrorClass)
		require.Equal(t, e.names.Events, p.OriginTopic)
		require.Equal(t, int64(i), p.OriginOffset, "the original stays readable at its origin offset")
		s, err := deadletter.ReadSummary(r)
		require.NoError(t, err)
		require.Equal(t, deadletter.Summary{EventID: want.id, Account: "acct_1", EventType: "invoice.paid", Size: want.size,
			Limit: event.DefaultMaxBytes, Detail: fmt.Sprintf("oversize: envelope is %d bytes, the limit is %d", want.size, event.DefaultMaxBytes)}, s)
		require.Less(t, len(r.Value), 1024)
		require.Equal(t, "k", string(r.Key), "original key kept")
		found := false
		for _, h := range r.Headers {
			if h.Key == router.HeaderEnvelopeError {
				found = true
				require.Equal(t, s.Detail, string(h.Value))
			}
		}
		require.True(t, found, "the %s header", router.HeaderEnvelopeError)
	}
	require.Equal(t, 2.0, counter(t, e.reg, "hookd_router_invalid_events_total", "oversize"))
}

func TestMaxEnvelopeBytesCeiling(t *testing.T) {
	t.Parallel()
	_, err := router.New(router.Config{MaxEnvelopeBytes: 1 << 20}, router.Deps{Endpoints: nil})
	require.EqualError(t, err, "router max envelope bytes: must be between 1024 and 983040, got 1048576")
}

// TestHugeRecordIsDeadLetteredAsSummary (issue 29): an invalid envelope
// in a record that is large for another reason (a key of almost 1 MB)
// is dead-lettered as a summary with its key clipped: a copy with the
// dead-letter headers would exceed the record limit and be refused
// forever, stopping the router. The event after it is fanned out.
func TestHugeRecordIsDeadLetteredAsSummary(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.endpoint(t, "ep_1", "acct_1", endpoint.StatusActive)
	e.startRouter(t)
	value := `{"id":"evt_bad","account":"acct_1"}`
	key := strings.Repeat("k", 999_800-len(value))
	cl := e.kafka.Client(t)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: e.names.Events, Key: []byte(key), Value: []byte(value)}).FirstErr())
	e.produce(t, `{"id":"evt_ok","account":"acct_1","type":"invoice.paid"}`)

	recs := consume(t, e.kafka, e.names.Deliveries, 1, 20*time.Second)
	require.Len(t, recs, 1)
	dlq := consume(t, e.kafka, e.names.DLQ, 1, 10*time.Second)
	require.Len(t, dlq, 1)
	p, err := deadletter.Read(dlq[0])
	require.NoError(t, err)
	require.Equal(t, deadletter.ReasonInvalidEnvelope, p.Reason)
	require.Equal(t, string(event.ReasonMissingType), p.ErrorClass)
	s, err := deadletter.ReadSummary(dlq[0])
	require.NoError(t, err)
	require.Equal(t, "evt_bad", s.EventID)
	require.Equal(t, key[:512], string(dlq[0].Key))
}
