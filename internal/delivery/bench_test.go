package delivery_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/producer/event"
)

var benchData = map[string]string{
	"small": `{"invoice":"in_123456","amount":1200}`,
	"large": `{"object":{"id":"sub_1","customer":"cus_9","items":[{"price":"price_1","quantity":2},{"price":"price_2","quantity":1}],` +
		`"status":"active","cancel_at_period_end":false,"metadata":{"plan":"pro","seats":"12"},"amount":-12.5e3,"note":"caf\u00e9 <b>"}}`,
}

func BenchmarkBody(b *testing.B) {
	created := time.Date(2026, 11, 30, 1, 2, 3, 456_000_000, time.UTC)
	for name, s := range benchData {
		data := json.RawMessage(s)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := delivery.Body("evt_123456", "invoice.paid", created, data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRecord(b *testing.B) {
	created := time.Date(2026, 11, 30, 1, 2, 3, 456_000_000, time.UTC)
	d := &delivery.Delivery{
		ID: delivery.ID("evt_123456", "ep_1_all"), EventID: "evt_123456", EventType: "invoice.paid", EndpointID: "ep_1_all",
		Account: "acct_1", EventCreated: created, Attempt: 1, Body: []byte(`{}`),
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = d.Record("webhooks.deliveries")
	}
}

func BenchmarkEventBody(b *testing.B) {
	created := time.Date(2026, 11, 30, 1, 2, 3, 456_000_000, time.UTC)
	for name, s := range benchData {
		env := event.Envelope{ID: "evt_123456", Type: "invoice.paid", Created: created, Data: json.RawMessage(s)}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := delivery.EventBody(env); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
