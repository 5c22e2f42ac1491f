package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/endpoint"
)

// BenchmarkIngressToDeliveries measures the router alone: b.N envelopes
// already on the events topic (100 accounts, two subscribed endpoints
// each, so 2*b.N deliveries) until every delivery is on the deliveries
// topic (the pending rows are written in the same batches, before the
// offsets are committed). Run with a fixed count:
//
//	go test -run XXX -bench IngressToDeliveries -benchtime 20000x ./producer/router/
func BenchmarkIngressToDeliveries(b *testing.B) {
	e := setup(b)
	for a := range 100 {
		e.endpoint(b, fmt.Sprintf("ep_%d_all", a), fmt.Sprintf("acct_%d", a), endpoint.StatusActive)
		e.endpoint(b, fmt.Sprintf("ep_%d_inv", a), fmt.Sprintf("acct_%d", a), endpoint.StatusActive, "invoice.*")
	}
	cl := e.kafka.Client(b, kgo.ProducerLinger(5*time.Millisecond))
	ctx := context.Background()
	for i := range b.N {
		v := fmt.Sprintf(`{"id":"evt_%d","account":"acct_%d","type":"invoice.paid","data":{"invoice":"in_%d","amount":1200}}`, i, i%100, i)
		cl.Produce(ctx, &kgo.Record{Topic: e.names.Events, Key: fmt.Appendf(nil, "acct_%d", i%100), Value: []byte(v)}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	b.ResetTimer()
	start := time.Now()
	e.startRouter(b)
	for {
		offs, err := adm.ListEndOffsets(ctx, e.names.Deliveries)
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
		if n >= int64(2*b.N) {
			break
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("only %d of %d deliveries after 5m", n, 2*b.N)
		}
		time.Sleep(10 * time.Millisecond) // polling
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "deliveries/s")
}
