package attempt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// An intent batch is a JSON array of attempt records that decodes back to
// the same records, each with the JSON its attempt record would have; a
// record json refuses to encode fails the batch; a single intent (as
// dispatchers before batches wrote it) still decodes.
func TestIntentBatchRoundTrip(t *testing.T) {
	t.Parallel()
	a, b := sampleRecord(), sampleRecord()
	a.Outcome, b.Outcome, b.AttemptID, b.Source = OutcomeUnknown, OutcomeUnknown, "att_2", &Position{Topic: "webhooks.deliveries", Offset: 8}
	kr, err := IntentBatch("webhooks.intents", []*Record{&a, &b})
	require.NoError(t, err)
	require.True(t, IsIntent(kr))
	require.Nil(t, kr.Key)
	var asJSON []Record
	require.NoError(t, json.Unmarshal(kr.Value, &asJSON), "readable as a JSON array")
	require.Len(t, asJSON, 2)

	got, err := DecodeIntents(kr)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, want := range []*Record{&a, &b} {
		single, err := want.KafkaRecord("webhooks.attempts")
		require.NoError(t, err)
		require.Equal(t, string(single.Value), string(got[i].Value), "intent %d: the attempt record's JSON", i)
		require.Equal(t, want.AttemptID, got[i].AttemptID)
		require.Equal(t, *want.Source, *got[i].Source)
	}

	single, err := a.KafkaRecord("webhooks.attempts")
	require.NoError(t, err)
	got, err = DecodeIntents(single)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, a.AttemptID, got[0].AttemptID)
	require.Equal(t, single.Value, got[0].Value)

	far := a
	far.StartedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = IntentBatch("webhooks.intents", []*Record{&a, &far})
	require.Error(t, err)
	invalid := a
	invalid.AttemptID = ""
	_, err = IntentBatch("webhooks.intents", []*Record{&invalid})
	require.ErrorContains(t, err, "intent 0")
	for _, v := range []string{`[{"attempt_id":""}]`, `[1,`, `{}`} {
		_, err = DecodeIntents(&kgo.Record{Value: []byte(v)})
		require.Error(t, err, v)
	}
}

// FuzzDecodeIntents: any value either decodes or is refused, never a
// panic; what decodes re-encodes to intents that decode the same.
func FuzzDecodeIntents(f *testing.F) {
	r := sampleRecord()
	kr, _ := IntentBatch("t", []*Record{&r, &r})
	f.Add(kr.Value)
	f.Add([]byte(`[]`))
	f.Add([]byte(` [{"attempt_id":"a"}]`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, err := DecodeIntents(&kgo.Record{Value: v})
		if err != nil {
			return
		}
		recs := make([]*Record, len(got))
		for i := range got {
			recs[i] = got[i].Record
		}
		again, err := IntentBatch("t", recs)
		if err != nil {
			return // a time json.Marshal refuses, for one
		}
		back, err := DecodeIntents(again)
		require.NoError(t, err)
		require.Len(t, back, len(got))
		for i := range got {
			require.Equal(t, got[i].AttemptID, back[i].AttemptID)
		}
	})
}
