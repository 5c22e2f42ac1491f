package event_test

import (
	"testing"
	"time"

	"github.com/hookd/hookd/producer/event"
)

// benchEnvelopes are typical envelopes: the router benchmark's, and one
// with a created time and a larger, nested payload.
var benchEnvelopes = map[string]string{
	"small": `{"id":"evt_123456","account":"acct_42","type":"invoice.paid","data":{"invoice":"in_123456","amount":1200}}`,
	"large": `{"id":"evt_01HZX3K9Q2","account":"acct_7","type":"customer.subscription.updated","created":"2026-11-30T01:02:03.456Z",` +
		`"data":{"object":{"id":"sub_1","customer":"cus_9","items":[{"price":"price_1","quantity":2},{"price":"price_2","quantity":1}],` +
		`"status":"active","cancel_at_period_end":false,"metadata":{"plan":"pro","seats":"12"},"amount":-12.5e3,"note":"caf\u00e9 <b>"}}}`,
}

func BenchmarkParse(b *testing.B) {
	for name, s := range benchEnvelopes {
		raw := []byte(s)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := event.Parse(raw, origin, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMarshal encodes the parsed benchEnvelopes, and an envelope as
// the relay builds it from an outbox row (data as Postgres prints jsonb,
// with spaces; created in microseconds).
func BenchmarkMarshal(b *testing.B) {
	envs := map[string]event.Envelope{
		"relay": {ID: "0193a0c2-7d4e-7a51-9c3e-5f7b1e2d3c4a", Account: "acct_42", Type: "invoice.paid",
			Data: []byte(`{"n": 123456, "amount": 1200}`), Created: time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)},
	}
	for name, s := range benchEnvelopes {
		env, err := event.Parse([]byte(s), origin, 0)
		if err != nil {
			b.Fatal(err)
		}
		envs[name] = env
	}
	for name, env := range envs {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := event.Marshal(env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
