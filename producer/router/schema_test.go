package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/eventtype"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
)

// With schema validation on, an event whose data breaks its type's schema
// is dead-lettered as schema_violation naming the first violation, and a
// valid one, or one of a type without a schema, is fanned out; with it
// off (the default), the same violating event is delivered.
func TestSchemaValidation(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{true, false} {
		name := map[bool]string{true: "on", false: "off"}[on]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			ctx := context.Background()
			_, err := e.db.Store.CreateEventType(ctx, eventtype.Type{Name: "invoice.paid",
				Schema: []byte(`{"type":"object","required":["invoice"],"properties":{"amount":{"type":"integer"}}}`)})
			require.NoError(t, err)
			e.endpoint(t, "ep_1", "acct_1", endpoint.StatusActive)
			deps := router.Deps{Endpoints: e.index, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger, Registerer: e.reg}
			if on {
				cat, err := eventtype.NewCatalog(eventtype.CatalogConfig{}, e.db.Store, e.logger)
				require.NoError(t, err)
				run(t, cat.Run)
				deps.Schemas = cat
			}
			r, err := router.New(router.Config{Topics: e.names}, deps)
			require.NoError(t, err)
			run(t, r.Run)
			e.produce(t,
				`{"id":"evt_bad","account":"acct_1","type":"invoice.paid","data":{"invoice":"in_1","amount":"12"}}`,
				`{"id":"evt_good","account":"acct_1","type":"invoice.paid","data":{"invoice":"in_2","amount":12}}`,
				`{"id":"evt_free","account":"acct_1","type":"customer.created","data":{"anything":true}}`,
			)
			want := []string{"evt_bad", "evt_free", "evt_good"}
			if on {
				want = want[1:]
			}
			recs := consume(t, e.kafka, e.names.Deliveries, len(want), 20*time.Second)
			var got []string
			for _, r := range recs {
				d, err := delivery.Decode(r)
				require.NoError(t, err)
				got = append(got, d.EventID)
			}
			require.ElementsMatch(t, want, got)
			if !on {
				require.Empty(t, consume(t, e.kafka, e.names.DLQ, 1, 2*time.Second), "no dead letter with validation off")
				return
			}
			dlq := consume(t, e.kafka, e.names.DLQ, 1, 10*time.Second)
			require.Len(t, dlq, 1)
			p, err := deadletter.Read(dlq[0])
			require.NoError(t, err)
			require.Equal(t, "schema_violation", p.ErrorClass)
			require.Contains(t, string(dlq[0].Value), "evt_bad")
			var detail string
			for _, h := range dlq[0].Headers {
				if h.Key == router.HeaderEnvelopeError {
					detail = string(h.Value)
				}
			}
			require.Equal(t, "schema_violation: at /amount: got string, want integer", detail)
			wait.For(t, 5*time.Second, "the schema_violation count", func() bool {
				return counter(t, e.reg, "hookd_router_invalid_events_total", "schema_violation") == 1
			})
		})
	}
}
