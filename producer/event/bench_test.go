package event_test

import (
	"testing"

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
