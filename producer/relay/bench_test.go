package relay_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/producer/router"
)

// BenchmarkOutboxToDeliveries measures the whole outbox path: b.N outbox
// rows committed by 4 writers in transactions of 100 rows while the relay
// streams and the router fans out (one subscribed endpoint per account),
// from the first insert until the last event is on the events topic
// (relay events/s) and until its delivery is on the deliveries topic
// (outbox-to-deliveries events/s), and the process's CPU time per event
// (the relay's, the router's, the in-process Kafka broker's and the
// writers'). The relay's and the router's goroutines (their Kafka clients'
// too) carry the pprof label role=relay or role=router, so that a CPU
// profile tells their shares apart. Run with a fixed count:
//
//	go test -run XXX -bench OutboxToDeliveries -benchtime 20000x ./producer/relay/
//
// and, for the relay's own CPU time, with -relay.cpuprofile cpu.out (a
// profile of the timed part), then
// go tool pprof -tagfocus role=relay -top cpu.out.
func BenchmarkOutboxToDeliveries(b *testing.B) { benchOutbox(b, true) }

// BenchmarkOutboxToEvents is BenchmarkOutboxToDeliveries without the
// router: its CPU time per event is the relay's, the in-process Kafka
// broker's and the writers'. Run with a fixed count:
//
//	go test -run XXX -bench OutboxToEvents -benchtime 20000x ./producer/relay/
func BenchmarkOutboxToEvents(b *testing.B) { benchOutbox(b, false) }

// cpuProfile names the file that benchOutbox writes a CPU profile of its
// timed part to.
var cpuProfile = flag.String("relay.cpuprofile", "", "write a CPU profile of the outbox benchmarks' timed part to `file`")

// profile starts a CPU profile if -relay.cpuprofile is set and
// returns its stop.
func profile(b *testing.B) (stop func()) {
	if *cpuProfile == "" {
		return func() {}
	}
	f, err := os.Create(*cpuProfile)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
	}
}

// benchOutbox runs the outbox benchmarks, with the router if route.
func benchOutbox(b *testing.B, route bool) {
	e := setup(b)
	ctx := context.Background()
	st := e.db.Store
	for a := range 100 {
		_, err := st.CreateEndpoint(ctx, endpoint.Endpoint{ID: fmt.Sprintf("ep_%d", a), Account: fmt.Sprintf("acct_%d", a),
			URL: "http://127.0.0.1:1/x", Secrets: []string{endpoint.NewSecret()}})
		if err != nil {
			b.Fatal(err)
		}
	}
	idx, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: st, Logger: e.logger})
	if err != nil {
		b.Fatal(err)
	}
	start(b, idx.Run)
	if route {
		rt, err := router.New(router.Config{Topics: e.names}, router.Deps{Endpoints: idx,
			KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger})
		if err != nil {
			b.Fatal(err)
		}
		start(b, labelled("router", rt.Run))
	}
	start(b, labelled("relay", e.newRelay(b, e.relayConfig()).Run))
	e.waitStreaming(b)
	adm := kadm.NewClient(e.kafka.Client(b))
	count := func(topic string) int64 {
		offs, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			b.Fatal(err)
		}
		var n int64
		offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
		return n
	}

	b.ResetTimer()
	stopProfile := profile(b)
	begin, cpu0 := time.Now(), processCPU(b)
	var wg sync.WaitGroup
	const writers, perTx = 4, 100
	for w := range writers {
		wg.Go(func() {
			for lo := w * perTx; lo < b.N; lo += writers * perTx {
				hi := min(lo+perTx, b.N)
				_, err := st.Pool().Exec(ctx, `INSERT INTO webhooks.outbox (account, type, payload)
					SELECT 'acct_' || (g % 100), 'invoice.paid', jsonb_build_object('n', g, 'amount', 1200)
					FROM generate_series($1::int, $2::int - 1) g`, lo, hi)
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	inserted := time.Since(begin)
	var relayed time.Duration
	for {
		if relayed == 0 && count(e.names.Events) >= int64(b.N) {
			relayed = time.Since(begin)
		}
		if relayed != 0 && (!route || count(e.names.Deliveries) >= int64(b.N)) {
			break
		}
		if time.Since(begin) > 5*time.Minute {
			b.Fatalf("not done after 5m: events %d, deliveries %d of %d", count(e.names.Events), count(e.names.Deliveries), b.N)
		}
		time.Sleep(10 * time.Millisecond) // polling
	}
	total, cpu := time.Since(begin), processCPU(b)-cpu0
	b.StopTimer()
	stopProfile()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/event")
	b.ReportMetric(float64(b.N)/inserted.Seconds(), "inserted/s")
	b.ReportMetric(float64(b.N)/relayed.Seconds(), "relayed-events/s")
	if route {
		b.ReportMetric(float64(b.N)/total.Seconds(), "outbox-to-deliveries-events/s")
	}
}

// labelled runs run with the pprof label role=name, which the goroutines it
// starts inherit.
func labelled(name string, run func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		var err error
		pprof.Do(ctx, pprof.Labels("role", name), func(ctx context.Context) { err = run(ctx) })
		return err
	}
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkResume measures a leader's resume after its replication
// connection is cut with b.N rows published since the slot's (lagging)
// position: from the cut until every row is streamed again and skipped
// (the events topic's tail read, the stream replayed). Run with a fixed
// count:
//
//	go test -run XXX -bench Resume -benchtime 20000x ./producer/relay/
func BenchmarkResume(b *testing.B) {
	e := setup(b)
	events := collect(b, e.kafka, e.names.Events)
	reg := prometheus.NewRegistry()
	start(b, e.newRelayWith(b, e.lazyConfig(), reg).Run)
	e.waitStreaming(b)
	e.insertTxns(b, e.db.Store, "rb_", b.N/100+1, 100)()
	rows := (b.N/100 + 1) * 100
	waitFor(b, "every row published", 5*time.Minute, func() bool {
		events.mu.Lock()
		defer events.mu.Unlock()
		return len(events.recs) >= rows
	})
	b.ResetTimer()
	began := time.Now()
	terminateReplication(b, e.db.Store, e.slot)
	for metric(b, reg, "hookd_relay_events_skipped_total", "") < float64(rows) {
		time.Sleep(5 * time.Millisecond) // polling
	}
	took := time.Since(began)
	b.StopTimer()
	b.ReportMetric(took.Seconds(), "resume-s")
	b.ReportMetric(float64(rows)/took.Seconds(), "skipped-rows/s")
}
