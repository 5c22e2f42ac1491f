package router_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/stage"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
)

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

// faultWindow is a kfake Fault When: it skips the first skip entities the
// fault matches (so the fault starts mid-batch), then faults every match
// for d from the first faulted one. faulting reports whether the window is
// open or not started.
type faultWindow struct {
	skip, seen int64
	d          time.Duration
	start      atomic.Int64
}

func (w *faultWindow) when(kmsg.Request) bool {
	if w.seen++; w.seen <= w.skip { // the cluster calls When serially
		return false
	}
	s := w.start.Load()
	if s == 0 {
		s = time.Now().UnixNano()
		w.start.Store(s)
	}
	return time.Since(time.Unix(0, s)) < w.d
}

func (w *faultWindow) open() bool {
	s := w.start.Load()
	return s != 0 && time.Since(time.Unix(0, s)) < w.d
}

func (w *faultWindow) over() bool {
	s := w.start.Load()
	return s != 0 && time.Since(time.Unix(0, s)) >= w.d
}

// outage is how long every fault lasts: twice the router's DrainTimeout.
const (
	drainTimeout = time.Second
	outage       = 2 * drainTimeout
)

// topicID returns the id of topic, which Produce and Fetch requests may
// name instead of its name.
func (e *env) topicID(t *testing.T, topic string) [16]byte {
	t.Helper()
	td, err := kadm.NewClient(e.kafka.Client(t)).ListTopics(context.Background(), topic)
	require.NoError(t, err)
	return td[topic].ID
}

// closeProduces closes the connection of every Produce request that writes
// to topic while the window is open, and of every new connection (its
// first request, ApiVersions) once it is open: the broker is gone for the
// router's producer. The test's clients keep the connections they have.
func (e *env) closeProduces(t *testing.T, topic string, w *faultWindow) {
	id := e.topicID(t, topic)
	e.kafka.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		for _, pt := range kreq.(*kmsg.ProduceRequest).Topics {
			if (pt.Topic == topic || pt.TopicID == id) && w.when(kreq) {
				return nil, errors.New("injected outage"), true
			}
		}
		return nil, nil, false
	})
	e.kafka.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		e.kafka.KeepControl()
		if w.open() {
			return nil, errors.New("injected outage"), true
		}
		return nil, nil, false
	})
}

type faultCase struct {
	name   string
	inject func(t *testing.T, e *env, w *faultWindow)
}

var faultCases = []faultCase{
	{name: "produce_not_leader", inject: func(t *testing.T, e *env, w *faultWindow) {
		e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Deliveries, Err: kerr.NotLeaderForPartition, Count: -1, When: w.when})
	}},
	{name: "produce_request_timed_out", inject: func(t *testing.T, e *env, w *faultWindow) {
		e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Deliveries, Err: kerr.RequestTimedOut, Count: -1, When: w.when})
	}},
	{name: "produce_connection_closed", inject: func(t *testing.T, e *env, w *faultWindow) {
		e.closeProduces(t, e.names.Deliveries, w)
	}},
	{name: "offset_commit_fails", inject: func(t *testing.T, e *env, w *faultWindow) {
		w.skip = 0
		e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Group: "hookd-router", Err: kerr.UnknownServerError, Count: -1, When: w.when})
	}},
	{name: "fetch_fails", inject: func(t *testing.T, e *env, w *faultWindow) {
		w.skip = 0
		e.kafka.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: e.names.Events, Err: kerr.UnknownServerError, Count: -1, When: w.when})
	}},
}

// Kafka faults lasting twice the DrainTimeout cost latency, not the
// router: it does not return, every event is fanned out exactly once (to
// a read_committed reader: a batch Kafka did not take is aborted and fanned
// out again), the offsets are committed once the fault ends, and each kind
// of fault is at most one WARN line.
func TestRouterRidesOutKafkaFaults(t *testing.T) {
	t.Parallel()
	for _, fc := range faultCases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			logs := &logBuffer{}
			e.logger = slog.New(slog.NewTextHandler(logs, nil))
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("router log:\n%s", logs.String())
				}
			})
			e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
			e.endpoint(t, "ep_b", "acct_1", endpoint.StatusActive)
			w := &faultWindow{skip: 2, d: outage}
			fc.inject(t, e, w)
			returned := e.startWatchedRouter(t, router.Config{Topics: e.names, DrainTimeout: drainTimeout, RetryBackoff: 10 * time.Millisecond,
				MaxPollRecords: 50})

			const events = 300
			ids := make([]string, events)
			vals := make([]string, events)
			for i := range ids {
				ids[i] = fmt.Sprintf("evt_%03d", i)
				vals[i] = fmt.Sprintf(`{"id":%q,"account":"acct_1","type":"invoice.paid"}`, ids[i])
			}
			e.produce(t, vals...)
			wait.For(t, 30*time.Second, "the fault window to open and close", w.over)
			if err, ok := returned(); ok {
				t.Fatalf("the router returned during the fault: %v", err)
			}

			recs := consume(t, e.kafka, e.names.Deliveries, 2*events, 30*time.Second)
			seen := map[string]int{}
			for _, r := range recs {
				d, err := delivery.Decode(r)
				require.NoError(t, err)
				seen[d.ID]++
			}
			dups := len(recs) - len(seen)
			if len(seen) != 2*events {
				e.diagnose(t, len(recs), len(seen))
			}
			for _, id := range ids {
				for _, ep := range []string{"ep_a", "ep_b"} {
					require.NotZero(t, seen[delivery.ID(id, ep)], "delivery of %s to %s lost", id, ep)
				}
			}
			require.Len(t, seen, 2*events, "only the events' deliveries")
			require.Zero(t, dups, "duplicates visible to a read_committed reader")
			t.Logf("%s: %d deliveries, %d duplicates", fc.name, len(recs), dups)

			e.waitCommitted(t, events)
			if err, ok := returned(); ok {
				t.Fatalf("the router returned after the fault: %v", err)
			}
			for _, line := range []string{"router transaction not committed", "router fetch fail", "router produce fail"} {
				t.Logf("%q logged %d times", line, logs.count(line))
				require.LessOrEqual(t, logs.count(line), 1, "%q: one WARN per outage", line)
			}
			require.GreaterOrEqual(t, histogramCount(t, e, stage.Route), uint64(events), "one route observation per event")
		})
	}
}

// startWatchedRouter runs a router like startRouter, and returns a
// function reporting whether Run has returned, and with what.
func (e *env) startWatchedRouter(t *testing.T, cfg router.Config) func() (error, bool) {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}
	if os.Getenv("HOOKD_TEST_KGO_LOG") != "" { // the client's own account of a failure
		opts = append(opts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgoLogLevel(), nil)))
	}
	r, err := router.New(cfg, router.Deps{Endpoints: e.index, KafkaOpts: opts, Logger: e.logger, Registerer: e.reg})
	require.NoError(t, err)
	var (
		mu     sync.Mutex
		result error
		done   bool
	)
	run(t, func(ctx context.Context) error {
		err := r.Run(ctx)
		mu.Lock()
		result, done = err, ctx.Err() == nil
		mu.Unlock()
		return err
	})
	return func() (error, bool) {
		mu.Lock()
		defer mu.Unlock()
		return result, done
	}
}

// waitCommitted waits until the router's group has committed every one of
// the events produced.
func (e *env) waitCommitted(t *testing.T, events int64) {
	t.Helper()
	adm := kadm.NewClient(e.kafka.Client(t))
	wait.For(t, 30*time.Second, "the router to commit every event", func() bool {
		offs, err := adm.FetchOffsets(context.Background(), "hookd-router")
		if err != nil {
			return false
		}
		var sum int64
		offs.Each(func(o kadm.OffsetResponse) { sum += o.At })
		return sum == events
	})
}

func histogramCount(t *testing.T, e *env, label string) uint64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != stage.Name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return 0
}

func kgoLogLevel() kgo.LogLevel {
	if os.Getenv("HOOKD_TEST_KGO_LOG") == "debug" {
		return kgo.LogLevelDebug
	}
	return kgo.LogLevelInfo
}

// diagnose logs what the deliveries topic and the router's metrics hold
// when deliveries are missing.
func (e *env) diagnose(t *testing.T, recs, distinct int) {
	t.Helper()
	ends, err := kadm.NewClient(e.kafka.Client(t)).ListEndOffsets(context.Background(), e.names.Deliveries)
	require.NoError(t, err)
	var sum int64
	ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
	t.Logf("consumed %d records (%d distinct); deliveries end offsets sum %d; router deliveries_total %v, events fanned_out %v",
		recs, distinct, sum, metrictest.Value(t, e.reg, "hookd_router_deliveries_total"),
		metrictest.Value(t, e.reg, "hookd_router_events_total", "fanned_out"))
}

// A permanent error (kafkaconn.Permanent) is not waited out: Run returns
// it, naming what failed, and the process ends with one clear line.
func TestRouterEndsOnPermanentError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(e *env) kfake.Fault
		want  error
	}{
		{"produce_topic_authorization", func(e *env) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.names.Deliveries, Err: kerr.TopicAuthorizationFailed, Count: -1}
		}, kerr.TopicAuthorizationFailed},
		{"commit_group_authorization", func(e *env) kfake.Fault {
			return kfake.Fault{Keys: []kmsg.Key{kmsg.TxnOffsetCommit}, Group: "hookd-router", Err: kerr.GroupAuthorizationFailed, Count: -1}
		}, kerr.GroupAuthorizationFailed},
		{"transactional_id_authorization", func(e *env) kfake.Fault {
			transactional := func(req kmsg.Request) bool { return req.(*kmsg.InitProducerIDRequest).TransactionalID != nil }
			return kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.TransactionalIDAuthorizationFailed, Count: -1, When: transactional}
		}, kerr.TransactionalIDAuthorizationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			e.endpoint(t, "ep_a", "acct_1", endpoint.StatusActive)
			e.kafka.Fault(tc.fault(e))
			r, err := router.New(router.Config{Topics: e.names, DrainTimeout: drainTimeout}, router.Deps{Endpoints: e.index,
				KafkaOpts: []kgo.Opt{kgo.SeedBrokers(e.kafka.Addrs...)}, Logger: e.logger, Registerer: e.reg})
			require.NoError(t, err)
			done := make(chan error, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { done <- r.Run(ctx) }()
			e.produce(t, `{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)
			select {
			case err := <-done:
				require.ErrorIs(t, err, tc.want)
				t.Logf("Run returned: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return on a permanent error")
			}
		})
	}
}
