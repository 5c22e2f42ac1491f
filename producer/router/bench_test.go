package router_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
)

// BenchmarkIngressToDeliveries measures the router alone: b.N envelopes
// already on the events topic (100 accounts, two subscribed endpoints
// each, so 2*b.N deliveries) until every delivery is on the deliveries
// topic (the pending rows are written in the same batches, before the
// offsets are committed). Run with a fixed count:
//
//	go test -run XXX -bench IngressToDeliveries -benchtime 20000x ./producer/router/
//
// The filters=all run gives both endpoints a payload filter that reads
// the type and the data and accepts every event, so the two runs make the
// same deliveries and differ by the filters' cost only.
func BenchmarkIngressToDeliveries(b *testing.B) {
	for _, tc := range []struct{ name, filter string }{
		{"filters=none", ""},
		{"filters=all", `{"type": {"$prefix": "invoice."}, "data": {"amount": {"$gte": 100}, "invoice": {"$exists": true}}}`},
	} {
		b.Run(tc.name, func(b *testing.B) { benchIngress(b, tc.filter) })
	}
}

func benchIngress(b *testing.B, filter string) {
	e := setup(b)
	for a := range 100 {
		e.filteredEndpoint(b, fmt.Sprintf("ep_%d_all", a), fmt.Sprintf("acct_%d", a), endpoint.StatusActive, filter)
		e.filteredEndpoint(b, fmt.Sprintf("ep_%d_inv", a), fmt.Sprintf("acct_%d", a), endpoint.StatusActive, filter, "invoice.*")
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
	start, cpu0 := time.Now(), processCPU(b)
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
	elapsed, cpu := time.Since(start), processCPU(b)-cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(2*b.N), "cpu-us/delivery")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(2*b.N)/elapsed.Seconds(), "deliveries/s")
}

// processCPU is the user and system CPU time of this process so far: the
// router's, but also the in-process Kafka broker's and the benchmark's own
// polling (the same in every run, so differences are the router's).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRouteLatency measures the router's latency at a steady load:
// b.N events produced at 2000/s (one subscribed endpoint each, producer
// linger 1ms like the relay's), each timed from its produce call until
// its delivery record is read back from the deliveries topic; it reports
// the p50 and p99 in milliseconds. Run with a fixed count:
//
//	go test -run XXX -bench RouteLatency -benchtime 20000x ./producer/router/
func BenchmarkRouteLatency(b *testing.B) {
	const rate = 2000
	e := setup(b)
	for a := range 100 {
		e.endpoint(b, fmt.Sprintf("ep_%d", a), fmt.Sprintf("acct_%d", a), endpoint.StatusActive)
	}
	e.startRouter(b)
	sent := make([]time.Time, b.N)
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	done := make(chan struct{})
	cons := e.kafka.Client(b, kgo.ConsumeTopics(e.names.Deliveries), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	go func() {
		defer close(done)
		deadline := time.Now().Add(time.Duration(b.N/rate)*time.Second + time.Minute)
		for n := 0; n < b.N && time.Now().Before(deadline); {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			f := cons.PollFetches(ctx)
			cancel()
			now := time.Now()
			f.EachRecord(func(r *kgo.Record) {
				d, err := delivery.Decode(r)
				if err != nil {
					return
				}
				var i int
				if _, err := fmt.Sscanf(d.EventID, "evt_%d", &i); err != nil || i >= b.N {
					return
				}
				mu.Lock()
				lat = append(lat, now.Sub(sent[i]))
				mu.Unlock()
				n++
			})
		}
	}()
	cl := e.kafka.Client(b, kgo.ProducerLinger(time.Millisecond))
	ctx := context.Background()
	b.ResetTimer()
	begin := time.Now()
	for i := range b.N {
		if d := time.Until(begin.Add(time.Duration(i) * time.Second / rate)); d > 0 {
			time.Sleep(d) // the load's schedule
		}
		v := fmt.Sprintf(`{"id":"evt_%d","account":"acct_%d","type":"invoice.paid","data":{"amount":1200}}`, i, i%100)
		mu.Lock()
		sent[i] = time.Now()
		mu.Unlock()
		cl.Produce(ctx, &kgo.Record{Topic: e.names.Events, Key: fmt.Appendf(nil, "acct_%d", i%100), Value: []byte(v)}, nil)
	}
	<-done
	b.StopTimer()
	if len(lat) < b.N {
		b.Fatalf("only %d of %d deliveries read back", len(lat), b.N)
	}
	slices.Sort(lat)
	ms := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}
