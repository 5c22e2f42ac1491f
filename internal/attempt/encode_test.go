package attempt

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func sampleRecord() Record {
	return Record{
		AttemptID: "att_0123456789abcdef01234567", DeliveryID: "dlv_1", EventID: "evt_1", EventType: "invoice.paid",
		EndpointID: "ep_1", Account: "acct_1", EventCreated: time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC),
		Attempt: 3, Tier: "webhooks.retry.2m", StartedAt: time.Date(2024, 5, 1, 12, 0, 1, 0, time.FixedZone("x", 3600)),
		Duration: 5 * time.Millisecond, StatusCode: 503, Outcome: OutcomeRetry, ErrorClass: "http_5xx",
		Error: "boom", ResponseExcerpt: "<html>oops & \"quotes\"\n\t\u2028é\xff\x00</html>", NextAction: NextRetry,
		NextDueAt: time.Date(2024, 5, 1, 12, 2, 1, 0, time.Local), DLQ: &Position{Topic: "webhooks.dlq", Partition: 3, Offset: 99},
		DeadReason: "retries_exhausted", ReplayID: "rpl_1", Destination: "https://example.com/hook?a=1&b=<2>",
		BodySHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		Source:     &Position{Topic: "webhooks.retry.2m", Partition: 5, Offset: 1234},
	}
}

// appendJSON encodes exactly as encoding/json does, field by field, for
// set and omitted fields, escapes, zones and every outcome.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	full := sampleRecord()
	cases := map[string]Record{"full": full, "empty": {}}
	minimal := full
	minimal.StatusCode, minimal.ErrorClass, minimal.Error, minimal.ResponseExcerpt = 0, "", "", ""
	minimal.NextDueAt, minimal.DLQ, minimal.DeadReason, minimal.ReplayID, minimal.Destination, minimal.BodySHA256 = time.Time{}, nil, "", "", "", ""
	minimal.Source = nil
	cases["minimal"] = minimal
	negative := full
	negative.Duration, negative.Attempt, negative.DLQ = -time.Second, -1, &Position{Partition: -1, Offset: -2}
	negative.Source = &Position{Partition: -1, Offset: -1}
	cases["negative"] = negative
	for name, r := range cases {
		want, err := json.Marshal(&r)
		require.NoError(t, err)
		got, ok := r.appendJSON(nil)
		require.True(t, ok, name)
		require.Equal(t, string(want), string(got), name)
	}
	// A year json refuses: no fast path, and KafkaRecord reports the error.
	far := full
	far.StartedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, ok := far.appendJSON(nil)
	require.False(t, ok)
	_, err := far.KafkaRecord("t")
	require.Error(t, err)
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("evt_1", "<a&b>\"\\", int64(0), int64(5e6))
	f.Add("é\u2028", "\x00\x1f\x7f\xff", int64(-62135596800), int64(-1))
	f.Fuzz(func(t *testing.T, a, b string, sec, n int64) {
		r := sampleRecord()
		r.EventID, r.Error, r.ResponseExcerpt, r.Destination = a, b, a+b, b
		r.Source = &Position{Topic: a, Partition: int32(n), Offset: sec}
		r.StartedAt, r.Duration = time.Unix(sec, n), time.Duration(n)
		want, err := json.Marshal(&r)
		got, ok := r.appendJSON(nil)
		if err != nil {
			if ok {
				t.Fatalf("json refuses (%v), appendJSON encoded %s", err, got)
			}
			return
		}
		if ok && string(got) != string(want) {
			t.Fatalf("appendJSON\n%s\njson\n%s", got, want)
		}
		if dec, ok := decodeFast(want); ok {
			var back Record
			if err := json.Unmarshal(want, &back); err != nil || !assertEqualRecords(back, dec) {
				t.Fatalf("decodeFast %+v, json %+v (%v)", dec, back, err)
			}
		}
	})
}

func BenchmarkKafkaRecord(b *testing.B) {
	r := sampleRecord()
	r.ResponseExcerpt, r.Error, r.Destination = "", "", "http://127.0.0.1:8081/e/ep_000001"
	r.NextDueAt, r.StartedAt = r.NextDueAt.UTC(), time.Now()
	b.Run("appendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.appendJSON(make([]byte, 0, 1024))
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(&r)
		}
	})
}

// KafkaRecord's key and value share one allocation of the exact size,
// and the key cannot grow into the value.
func TestKafkaRecordOneAllocation(t *testing.T) { // not parallel: AllocsPerRun
	r := sampleRecord()
	r.ResponseExcerpt, r.Destination = "plain excerpt", "http://example.com/hook"
	want, ok := r.appendJSON(nil)
	require.True(t, ok)
	kr, err := r.KafkaRecord("webhooks.attempts")
	require.NoError(t, err)
	require.Equal(t, r.DeliveryID, string(kr.Key))
	require.Equal(t, string(want), string(kr.Value))
	require.Equal(t, len(kr.Key), cap(kr.Key), "an append to the key would overwrite the value")
	require.Equal(t, len(kr.Value), cap(kr.Value), "the value's allocation is its size")
	allocs := testing.AllocsPerRun(100, func() { _, _ = r.KafkaRecord("webhooks.attempts") })
	require.LessOrEqual(t, allocs, 2.0, "the kgo.Record and one buffer")
}

// decodeFast reads what appendJSON writes as json.Unmarshal does, and
// gives up (for json.Unmarshal to decode) on anything else.
func TestDecodeFastMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	plain := sampleRecord()
	plain.ResponseExcerpt, plain.Destination = "oops", "https://example.com/hook"
	minimal := plain
	minimal.StatusCode, minimal.ErrorClass, minimal.Error, minimal.ResponseExcerpt = 0, "", "", ""
	minimal.NextDueAt, minimal.DLQ, minimal.DeadReason, minimal.ReplayID, minimal.Destination, minimal.BodySHA256 = time.Time{}, nil, "", "", "", ""
	minimal.Source = nil
	negative := plain
	negative.Duration, negative.Attempt, negative.DLQ = -time.Second, -1, &Position{Partition: -1, Offset: -2}
	negative.Source = &Position{Topic: "webhooks.deliveries", Partition: -1, Offset: -1}
	for name, r := range map[string]Record{"plain": plain, "minimal": minimal, "negative": negative, "empty": {}} {
		b, ok := r.appendJSON(nil)
		require.True(t, ok)
		got, ok := decodeFast(b)
		require.True(t, ok, name)
		requireSameAsJSON(t, b, got)
	}
	// Escapes, other key orders, whitespace, unknown keys, numbers json
	// reads otherwise: the slow way.
	full := sampleRecord()
	esc, _ := full.appendJSON(nil)
	for _, b := range [][]byte{esc, []byte(`{"delivery_id":"d","attempt_id":"a"}`), []byte(`{ "attempt_id":"a"}`),
		[]byte(`{"attempt_id":"a","x":1}`), []byte(`null`), []byte(``)} {
		_, ok := decodeFast(b)
		require.False(t, ok, string(b))
	}
}

func requireSameAsJSON(t *testing.T, data []byte, got Record) {
	t.Helper()
	var want Record
	require.NoError(t, json.Unmarshal(data, &want))
	require.Equal(t, want, got)
	// time.Time values that are Equal but differ in location would pass
	// require.Equal only if identical; be explicit about instants too.
	require.True(t, want.StartedAt.Equal(got.StartedAt) && want.EventCreated.Equal(got.EventCreated) && want.NextDueAt.Equal(got.NextDueAt))
}

func FuzzDecodeFast(f *testing.F) {
	for _, r := range []Record{sampleRecord(), {}} {
		b, _ := r.appendJSON(nil)
		f.Add(b)
	}
	f.Add([]byte(`{"attempt_id":"a","delivery_id":"d","event_id":"e","event_type":"t","endpoint_id":"p","account":"c","event_created":"2024-05-01T12:00:00Z","attempt":01,"tier":"x","started_at":"2024-05-01T12:00:00Z","duration_ns":-0,"outcome":"retry","next_action":"retry"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := decodeFast(data)
		if !ok {
			return
		}
		var want Record
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("decodeFast accepted what json refuses (%v): %q", err, data)
		}
		if !assertEqualRecords(want, got) {
			t.Fatalf("decodeFast %+v, json %+v: %q", got, want, data)
		}
	})
}

func assertEqualRecords(a, b Record) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func BenchmarkDecode(b *testing.B) {
	r := sampleRecord()
	r.ResponseExcerpt, r.Destination = "ok", "127.0.0.1:80"
	kr, err := r.KafkaRecord("t")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(kr); err != nil {
			b.Fatal(err)
		}
	}
}

// The source position survives KafkaRecord and Decode, by the fast path
// and by encoding/json (a record written by another encoder); an intent
// is told by its header alone.
func TestSourceRoundTripAndIntent(t *testing.T) {
	t.Parallel()
	r := sampleRecord()
	r.ResponseExcerpt, r.Destination, r.Outcome, r.Error = "ok", "https://example.com/hook", OutcomeUnknown, ErrorUnknown
	kr, err := r.KafkaRecord("webhooks.attempts")
	require.NoError(t, err)
	_, fast := decodeFast(kr.Value)
	require.True(t, fast)
	got, err := Decode(kr)
	require.NoError(t, err)
	require.Equal(t, *r.Source, *got.Source)
	require.Equal(t, OutcomeUnknown, got.Outcome)
	slow, err := json.Marshal(map[string]any{"attempt_id": "a", "delivery_id": "d", "event_id": "e", "endpoint_id": "p",
		"started_at": r.StartedAt, "outcome": "unknown", "next_action": "retry",
		"source": map[string]any{"topic": "webhooks.deliveries", "partition": 2, "offset": 7}})
	require.NoError(t, err)
	got, err = Decode(&kgo.Record{Value: slow})
	require.NoError(t, err)
	require.Equal(t, Position{Topic: "webhooks.deliveries", Partition: 2, Offset: 7}, *got.Source)

	require.False(t, IsIntent(kr))
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: "other"}, kgo.RecordHeader{Key: IntentHeader})
	require.True(t, IsIntent(kr))
}
