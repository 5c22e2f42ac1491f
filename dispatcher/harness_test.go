package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/retrytiers"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	secretA = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	secretB = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
)

// endpointMap is a mutable dispatcher.Endpoints for tests.
type endpointMap struct {
	mu sync.RWMutex
	m  map[string]dispatcher.Target
}

func (e *endpointMap) Endpoint(id string) (dispatcher.Target, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	t, ok := e.m[id]
	return t, ok
}

func (e *endpointMap) set(t dispatcher.Target) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if t.Secrets == nil {
		t.Secrets = []string{secretA}
	}
	if t.Account == "" {
		t.Account = "acct_1"
	}
	e.m[t.ID] = t
}

// bundle is what an integration test needs.
type bundle struct {
	t        testing.TB
	cluster  *kafkatest.Cluster
	tcfg     topics.Config
	names    topics.Names
	eps      *endpointMap
	producer *kgo.Client
	col      *collector
}

type setupOpts struct {
	partitions int32
	schedule   string
}

func setup(t testing.TB, o setupOpts) *bundle {
	t.Helper()
	if o.partitions == 0 {
		o.partitions = 4
	}
	if o.schedule == "" {
		o.schedule = retrytiers.DefaultSchedule
	}
	s, err := retrytiers.ParseSchedule(o.schedule)
	require.NoError(t, err)
	tcfg := topics.Config{Prefix: "webhooks", Partitions: o.partitions, Schedule: s}
	c := kafkatest.NewProvisioned(t, tcfg)
	b := &bundle{
		t: t, cluster: c, tcfg: tcfg, names: topics.NamesFor(tcfg),
		eps:      &endpointMap{m: map[string]dispatcher.Target{}},
		producer: c.Client(t, kgo.ProducerLinger(0)),
	}
	b.col = newCollector(t, c, b.names)
	return b
}

type runOpts struct {
	clock clock.Clock
	reg   prometheus.Registerer
	// log receives the dispatcher's log at debug level when set.
	log io.Writer
	// tracer, when set, turns tracing on.
	tracer trace.Tracer
}

// start runs a dispatcher until the returned stop is called (or the test ends).
func (b *bundle) start(cfg dispatcher.Config, o runOpts) (stop func()) {
	b.t.Helper()
	cfg.Topics = b.tcfg
	if cfg.CommitInterval == 0 {
		cfg.CommitInterval = 100 * time.Millisecond
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.log != nil {
		logger = slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	} else if os.Getenv("HOOKD_TEST_LOG") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	d, err := dispatcher.New(cfg, dispatcher.Deps{
		Endpoints:  b.eps,
		Logger:     logger,
		Registerer: o.reg,
		Clock:      o.clock,
		Tracer:     o.tracer,
		KafkaOpts: []kgo.Opt{
			kgo.SeedBrokers(b.cluster.Addrs...),
			kgo.ProducerLinger(0),
		},
	})
	require.NoError(b.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(b.t, err)
			case <-time.After(60 * time.Second):
				b.t.Error("dispatcher did not stop within 60s")
			}
		})
	}
	b.t.Cleanup(stop)
	return stop
}

func newDelivery(eventID, endpointID string) *delivery.Delivery {
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	body, err := delivery.Body(eventID, "invoice.paid", created, json.RawMessage(`{"invoice":"in_`+eventID+`"}`))
	if err != nil {
		panic(err)
	}
	return &delivery.Delivery{
		ID: delivery.ID(eventID, endpointID), EventID: eventID, EventType: "invoice.paid",
		EndpointID: endpointID, Account: "acct_1", EventCreated: created, Attempt: 1, Body: body,
	}
}

// produce writes deliveries to the deliveries topic; partition < 0 hashes the key.
func (b *bundle) produce(partition int32, ds ...*delivery.Delivery) {
	b.t.Helper()
	recs := make([]*kgo.Record, len(ds))
	for i, d := range ds {
		recs[i] = d.Record(b.names.Deliveries)
		recs[i].Partition = partition
	}
	cl := b.producer
	if partition >= 0 {
		cl = b.cluster.Client(b.t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(b.t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// committed returns the group's committed offsets summed over partitions of topic.
func (b *bundle) committed(group, topic string) (sum int64, byPartition map[int32]int64) {
	adm := kadm.NewClient(b.producer)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := adm.FetchOffsets(ctx, group)
	require.NoError(b.t, err)
	byPartition = map[int32]int64{}
	offs.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			byPartition[o.Partition] = o.At
			sum += o.At
		}
	})
	return sum, byPartition
}

// collector reads the attempts, dead-letter and retry topics.
type collector struct {
	mu       sync.Mutex
	attempts []*attempt.Record
	intents  []attempt.Intent // intent records, not attempts
	dlq      []*kgo.Record
	retries  []*kgo.Record
	// traceparents are the attempt records' traceparent headers, by
	// attempt id.
	traceparents map[string]string
}

func newCollector(t testing.TB, c *kafkatest.Cluster, names topics.Names) *collector {
	col := &collector{traceparents: map[string]string{}}
	cl := c.Client(t, kgo.ConsumeTopics(append([]string{names.Attempts, names.Intents, names.DLQ}, names.Retry...)...),
		kgo.FetchMaxWait(50*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				col.mu.Lock()
				defer col.mu.Unlock()
				switch r.Topic {
				case names.Attempts, names.Intents:
					if attempt.IsIntent(r) {
						ins, err := attempt.DecodeIntents(r)
						if err != nil {
							t.Errorf("bad intent record: %v", err)
						}
						for _, in := range ins {
							col.intents = append(col.intents, in)
						}
						return
					}
					a, err := attempt.Decode(r)
					if err != nil {
						t.Errorf("bad attempt record: %v", err)
						return
					}
					col.attempts = append(col.attempts, a)
					for _, h := range r.Headers {
						if h.Key == delivery.HeaderTraceparent {
							col.traceparents[a.AttemptID] = string(h.Value)
						}
					}
				case names.DLQ:
					col.dlq = append(col.dlq, r)
				default:
					col.retries = append(col.retries, r)
				}
			})
		}
	}()
	return col
}

func (c *collector) snapshot() (att []*attempt.Record, dlq, retries []*kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*attempt.Record(nil), c.attempts...), append([]*kgo.Record(nil), c.dlq...), append([]*kgo.Record(nil), c.retries...)
}

// traceparent returns the traceparent header of attempt record id ("" if none).
func (c *collector) traceparent(attemptID string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.traceparents[attemptID]
}

// attemptsFor returns the attempt records of a delivery, in order produced.
func (c *collector) attemptsFor(deliveryID string) []*attempt.Record {
	att, _, _ := c.snapshot()
	var out []*attempt.Record
	for _, a := range att {
		if a.DeliveryID == deliveryID {
			out = append(out, a)
		}
	}
	return out
}

func eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	wait.For(t, timeout, fmt.Sprintf(msg, args...), cond)
}

// receiver is a webhook receiver on 127.0.0.1.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	ids      map[string]int
	bodies   map[string][]byte
	headers  map[string]http.Header
	inFlight atomic.Int32
	maxSeen  atomic.Int32
	answered atomic.Int32
	handle   func(w http.ResponseWriter, r *http.Request)
}

// hangUntil is a receiver's handler that answers only once release is
// closed (or the request is cancelled).
func hangUntil(release <-chan struct{}) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
}

func newReceiver(t testing.TB, handle func(w http.ResponseWriter, r *http.Request)) *receiver {
	rc := &receiver{ids: map[string]int{}, bodies: map[string][]byte{}, headers: map[string]http.Header{}, handle: handle}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := rc.inFlight.Add(1)
		defer rc.inFlight.Add(-1)
		for {
			m := rc.maxSeen.Load()
			if n <= m || rc.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		body, _ := io.ReadAll(r.Body)
		id := r.Header.Get("webhook-id")
		rc.mu.Lock()
		rc.ids[id]++
		rc.bodies[id] = body
		rc.headers[id] = r.Header.Clone()
		rc.mu.Unlock()
		if rc.handle != nil {
			rc.handle(w, r)
		}
		rc.answered.Add(1)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) count(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.ids[id]
}

func (rc *receiver) distinct() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.ids)
}

func (rc *receiver) total() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, c := range rc.ids {
		n += c
	}
	return n
}
