package attempt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func sampleIntent() Intent {
	r := sampleRecord()
	return Intent{AttemptID: r.AttemptID, Source: *r.Source, Attempt: r.Attempt, StartedAt: r.StartedAt,
		Destination: r.Destination}
}

// An intent batch is {"intents":[...]}, encoded byte for byte as
// encoding/json encodes it, that decodes back to the same intents; an
// intent json refuses to encode, or one a resumer could not use, fails
// the batch.
func TestIntentBatchRoundTrip(t *testing.T) {
	t.Parallel()
	a, b := sampleIntent(), sampleIntent()
	b.AttemptID, b.Source, b.Destination = "att_2", Position{Topic: "webhooks.deliveries", Offset: 8}, ""
	kr, err := IntentBatch("webhooks.intents", []*Intent{&a, &b})
	require.NoError(t, err)
	require.True(t, IsIntent(kr))
	require.Nil(t, kr.Key)
	want, err := json.Marshal(intentBatch{Intents: []*Intent{&a, &b}})
	require.NoError(t, err)
	require.Equal(t, string(want), string(kr.Value))

	got, err := DecodeIntents(kr)
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, want := range []Intent{a, b} {
		require.Equal(t, want.AttemptID, got[i].AttemptID)
		require.Equal(t, want.Source, got[i].Source)
		require.Equal(t, want.Attempt, got[i].Attempt)
		require.True(t, want.StartedAt.Equal(got[i].StartedAt))
		require.Equal(t, want.Destination, got[i].Destination)
	}

	far := a
	far.StartedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = IntentBatch("webhooks.intents", []*Intent{&a, &far})
	require.Error(t, err)
	invalid := a
	invalid.Source.Topic = ""
	_, err = IntentBatch("webhooks.intents", []*Intent{&invalid})
	require.ErrorContains(t, err, "intent 0")
	for _, v := range []string{`{"intents":[{"attempt_id":""}]}`, `{"intents":[1]}`, `[{"attempt_id":""}]`, `[1,`, `{}`, `{"intents":null}`} {
		_, err = DecodeIntents(&kgo.Record{Value: []byte(v)})
		require.Error(t, err, v)
	}
}

// Intent records of older dispatchers, whole attempt records of outcome
// unknown (a JSON array of them, or one), decode to the intents they stand
// for; one without a source is left out.
func TestDecodeIntentsOfOlderDispatchers(t *testing.T) {
	t.Parallel()
	a, b := sampleRecord(), sampleRecord()
	a.Outcome, b.Outcome, b.AttemptID, b.Source = OutcomeUnknown, OutcomeUnknown, "att_2", nil
	ka, err := a.KafkaRecord("webhooks.attempts")
	require.NoError(t, err)
	kb, err := b.KafkaRecord("webhooks.attempts")
	require.NoError(t, err)
	want := sampleIntent()
	for name, v := range map[string]string{"array": "[" + string(ka.Value) + "," + string(kb.Value) + "]", "single": string(ka.Value)} {
		got, err := DecodeIntents(&kgo.Record{Value: []byte(v)})
		require.NoError(t, err, name)
		require.Len(t, got, 1, name)
		require.Equal(t, want.AttemptID, got[0].AttemptID, name)
		require.Equal(t, want.Source, got[0].Source, name)
		require.Equal(t, want.Attempt, got[0].Attempt, name)
		require.True(t, want.StartedAt.Equal(got[0].StartedAt), name)
		require.Equal(t, want.Destination, got[0].Destination, name)
	}
	// One whose source names no topic cannot be used: the record fails.
	a.Source = &Position{}
	ka, err = a.KafkaRecord("webhooks.attempts")
	require.NoError(t, err)
	_, err = DecodeIntents(&kgo.Record{Value: []byte("[" + string(ka.Value) + "]")})
	require.ErrorContains(t, err, "no source position")
}

// FuzzDecodeIntents: any value either decodes or is refused, never a
// panic; what decodes re-encodes, byte for byte as encoding/json encodes
// it (IntentBatch's encoder is hand-written), to intents that decode the
// same.
func FuzzDecodeIntents(f *testing.F) {
	in := sampleIntent()
	kr, _ := IntentBatch("t", []*Intent{&in, &in})
	f.Add(kr.Value)
	r := sampleRecord()
	old, _ := r.KafkaRecord("t")
	f.Add(append(append([]byte("["), old.Value...), ']'))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"intents":[]}`))
	f.Add([]byte(` [{"attempt_id":"a"}]`))
	f.Fuzz(func(t *testing.T, v []byte) {
		got, err := DecodeIntents(&kgo.Record{Value: v})
		if err != nil {
			return
		}
		ins := make([]*Intent, len(got))
		for i := range got {
			ins[i] = &got[i]
		}
		again, err := IntentBatch("t", ins)
		want, jerr := json.Marshal(intentBatch{Intents: ins})
		if err != nil {
			require.Error(t, jerr, "IntentBatch refused what encoding/json encodes: %v", err)
			return // a time json.Marshal refuses, for one
		}
		require.NoError(t, jerr)
		require.Equal(t, string(want), string(again.Value))
		back, err := DecodeIntents(again)
		require.NoError(t, err)
		require.Len(t, back, len(got))
		for i := range got {
			require.Equal(t, got[i].AttemptID, back[i].AttemptID)
			require.Equal(t, got[i].Source, back[i].Source)
		}
	})
}
