package deadletter_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
)

func TestRecordKeepsKeyValueAndHeaders(t *testing.T) {
	t.Parallel()
	src := &kgo.Record{
		Topic: "webhooks.retry.24h", Partition: 7, Offset: 42,
		Key: []byte("ep_1"), Value: []byte(`{"id":"evt_1"}`),
		Headers: []kgo.RecordHeader{
			{Key: "hookd-event-id", Value: []byte("evt_1")},
			{Key: deadletter.HeaderReason, Value: []byte("stale from a replayed dead letter")},
		},
	}
	first := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	p := deadletter.Provenance{
		OriginTopic: src.Topic, OriginPartition: src.Partition, OriginOffset: src.Offset,
		Attempts: 11, FirstAttempt: first, LastAttempt: first.Add(48 * time.Hour),
		LastStatus: 503, ErrorClass: "http_5xx", Reason: deadletter.ReasonRetriesExhausted,
		DeadAt: first.Add(48 * time.Hour),
	}
	r := deadletter.Record("webhooks.dlq", src, p)
	require.Equal(t, "webhooks.dlq", r.Topic)
	require.Equal(t, int32(7), r.Partition)
	require.Equal(t, src.Key, r.Key)
	require.Same(t, &src.Value[0], &r.Value[0], "value is the original bytes")
	require.Equal(t, "hookd-event-id", r.Headers[0].Key)

	reasons := 0
	for _, h := range r.Headers {
		if h.Key == deadletter.HeaderReason {
			reasons++
		}
	}
	require.Equal(t, 1, reasons, "stale provenance headers are replaced")

	got, err := deadletter.Read(r)
	require.NoError(t, err)
	require.Equal(t, p, got)

	_, err = deadletter.Read(&kgo.Record{Key: src.Key, Value: src.Value})
	require.Error(t, err, "a record without a reason is not a dead letter")
}
