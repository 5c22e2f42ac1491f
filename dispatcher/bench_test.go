package dispatcher_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/dispatcher/signature"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/tlstest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/tracing"
	"github.com/hookd/hookd/retrytiers"
)

// The dispatcher benchmarks measure the CPU the dispatcher spends per
// delivery under the load of `make bench` (hookbench): 1000 endpoints, one
// account each, spread over 4 receivers on 127.0.0.1 that verify every
// signature and answer 200 after 5ms, 6 partitions, the default
// Concurrency (256) and the Kafka client options hookd runs with.
// BenchmarkDispatcher and BenchmarkPlainSend run three times: receivers on
// http, on https offering HTTP/2 (what hookbench's receivers do, and most
// real ones), and on https with HTTP/1.1 only.
//
// The broker (kfake) and the receivers run in a peer process (this test
// binary re-executed), so the benchmark process holds the dispatcher alone
// (and a poll of the peer's counters): its CPU time (getrusage), its
// allocations and a -cpuprofile are the dispatcher's. Run them with
//
//	go test ./dispatcher -run '^$' -bench 'Dispatcher|PlainSend' -benchtime 30000x -cpuprofile cpu.out
//	go tool pprof -top dispatcher.test cpu.out
//
// With tracing on in the environment (OTEL_TRACES_EXPORTER=otlp), every
// delivery record carries a traceparent, every endpoint has
// SendTraceparent, and the dispatcher exports its spans over OTLP/HTTP to
// a collector in the peer process that reads and discards them: the cost
// of tracing per delivery is the difference with a run without it.
//
// Reported per delivery: cpu_us/delivery (user+system CPU of this process),
// allocs/op and B/op, conns/delivery (new connections the receivers
// accepted), fetches/delivery, produces/delivery and fetched/delivery (the
// records fetched: above 1 when a paused partition's buffered records were
// dropped and fetched again), and the rate. BenchmarkPlainSend is B0's sender: a plain Go
// loop of 256 goroutines posting the same signed bodies to the same
// receivers; it also reports b0_us/delivery, the sender's CPU plus the
// receivers' (the peer's), B0's whole cost per delivery.

const (
	benchEndpoints  = 1000
	benchReceivers  = 4
	benchLatency    = 5 * time.Millisecond
	benchPartitions = 6
	benchWarmup     = 2000
	peerEnv         = "HOOKD_DISPATCH_BENCH_PEER"
	// peerTLSEnv holds "cert-file,key-file,proto" when the peer's receivers
	// serve https: proto "h2" offers HTTP/2 (ALPN), "h1" HTTP/1.1 only.
	peerTLSEnv = "HOOKD_DISPATCH_BENCH_TLS"
)

// scheme is how a benchmark's receivers serve: http, or https offering
// HTTP/2 or HTTP/1.1 only. The https runs measure the path real endpoints
// take; the http run keeps the older figures comparable.
type scheme struct {
	name  string
	proto string // "" for http
	ca    *tlstest.CA
}

var schemes = []scheme{{name: "http"}, {name: "https-h2", proto: "h2"}, {name: "https-h1", proto: "h1"}}

// peerInfo is what the peer process reports on its stdout.
type peerInfo struct {
	// OTLP is the peer's discarding OTLP/HTTP collector, when tracing is on.
	OTLP      string      `json:"otlp,omitempty"`
	Kafka     []string    `json:"kafka"`
	Control   string      `json:"control"`
	Endpoints []peerEndpt `json:"endpoints"`
}

type peerEndpt struct {
	ID, URL, Secret string
}

// peerStats are the peer's counters.
type peerStats struct {
	Delivered int64 `json:"delivered"`
	BadSig    int64 `json:"bad_sig"`
	Conns     int64 `json:"conns"`
	CPUMicros int64 `json:"cpu_us"`
	// P50Millis and P99Millis are the latencies, from the produce to the
	// receiver's verified request, of the streamed records so far.
	P50Millis float64 `json:"p50_ms"`
	P99Millis float64 `json:"p99_ms"`
}

func benchTopics() topics.Config {
	s, err := retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	if err != nil {
		panic(err)
	}
	return topics.Config{Prefix: "webhooks", Partitions: benchPartitions, Schedule: s}
}

func benchBody(id string) []byte {
	b, err := delivery.Body(id, "invoice.paid", time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
		json.RawMessage(fmt.Sprintf(`{"id":%q,"pad":%q}`, id, strings.Repeat("p", 200))))
	if err != nil {
		panic(err)
	}
	return b
}

// peer is the running peer process.
type peer struct {
	info peerInfo
	cmd  *exec.Cmd
	in   io.WriteCloser
	hc   *http.Client
	seq  int
}

func startPeer(b *testing.B, sch *scheme) *peer {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDispatcherBenchPeer$", "-test.count=1")
	cmd.Env = append(os.Environ(), peerEnv+"=1")
	if sch.proto != "" {
		sch.ca = tlstest.NewCA(b)
		cert := sch.ca.Server(b, "localhost")
		cmd.Env = append(cmd.Env, peerTLSEnv+"="+cert.CertFile+","+cert.KeyFile+","+sch.proto)
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &peer{cmd: cmd, in: in, hc: &http.Client{}}
	b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if line := sc.Bytes(); bytes.HasPrefix(line, []byte("{")) {
			if err := json.Unmarshal(line, &p.info); err != nil {
				b.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return p
		}
	}
	b.Fatalf("peer exited without reporting: %v", sc.Err())
	return nil
}

func (p *peer) call(b *testing.B, path string, v any) {
	resp, err := p.hc.Post("http://"+p.info.Control+path, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("peer %s: %s", path, msg)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			b.Fatal(err)
		}
	}
}

// produce has the peer write n deliveries, round-robin over the endpoints.
func (p *peer) produce(b *testing.B, n int) {
	p.call(b, fmt.Sprintf("/produce?n=%d&from=%d", n, p.seq), nil)
	p.seq += n
}

func (p *peer) stats(b *testing.B) peerStats {
	var s peerStats
	p.call(b, "/stats", &s)
	return s
}

// waitDelivered polls the peer until n deliveries have been answered 200.
func (p *peer) waitDelivered(b *testing.B, n int64) peerStats {
	deadline := time.Now().Add(5 * time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		s := p.stats(b)
		if s.Delivered >= n {
			return s
		}
		if time.Now().After(deadline) {
			b.Fatalf("delivered %d of %d in 5 minutes", s.Delivered, n)
		}
	}
	return peerStats{}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// kafkaRequests counts the dispatcher's fetch and produce requests, and
// the records its fetches read (more than the deliveries when buffered
// records of a paused partition are dropped and fetched again).
type kafkaRequests struct{ fetches, produces, fetched atomic.Int64 }

func (k *kafkaRequests) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	k.fetched.Add(int64(m.NumRecords))
}

func (k *kafkaRequests) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	switch {
	case err != nil:
	case key == 1: // Fetch
		k.fetches.Add(1)
	case key == 0: // Produce
		k.produces.Add(1)
	}
}

// measure runs one timed phase of b.N deliveries and reports its figures;
// reqs, when set, are the dispatcher's Kafka requests.
func measure(b *testing.B, p *peer, reqs *kafkaRequests, run func()) (cpu time.Duration, before, after peerStats) {
	before = p.stats(b)
	var f0, p0, r0 int64
	if reqs != nil {
		f0, p0, r0 = reqs.fetches.Load(), reqs.produces.Load(), reqs.fetched.Load()
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0, t0 := cpuNow(), time.Now()
	run()
	after = p.waitDelivered(b, before.Delivered+int64(b.N))
	cpu, elapsed := cpuNow()-c0, time.Since(t0)
	b.StopTimer()
	n := float64(b.N)
	if reqs != nil {
		b.ReportMetric(float64(reqs.fetches.Load()-f0)/n, "fetches/delivery")
		b.ReportMetric(float64(reqs.produces.Load()-p0)/n, "produces/delivery")
		b.ReportMetric(float64(reqs.fetched.Load()-r0)/n, "fetched/delivery")
	}
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu_us/delivery")
	// The peer's CPU: the broker's, the receivers' and the producer's of
	// the delivery records, the same for every dispatcher but for what the
	// dispatcher's Kafka requests cost the broker.
	b.ReportMetric(float64(after.CPUMicros-before.CPUMicros)/n, "peer_us/delivery")
	b.ReportMetric(float64(after.Conns-before.Conns)/n, "conns/delivery")
	b.ReportMetric(n/elapsed.Seconds(), "deliveries/s")
	// What the runtime starts goroutines with (requesterStack says why it
	// matters): 8192 when the requesters' reserve works.
	ss := []metrics.Sample{{Name: "/gc/stack/starting-size:bytes"}}
	metrics.Read(ss)
	b.ReportMetric(float64(ss[0].Value.Uint64()), "start_stack_bytes")
	if after.P99Millis > 0 {
		b.ReportMetric(after.P50Millis, "p50_ms")
		b.ReportMetric(after.P99Millis, "p99_ms")
	}
	if after.BadSig != 0 {
		b.Fatalf("receivers rejected %d signatures", after.BadSig)
	}
	return cpu, before, after
}

// BenchmarkDispatcher delivers b.N webhooks through a dispatcher and
// reports its CPU per delivery.
func BenchmarkDispatcher(b *testing.B) {
	for _, sc := range schemes {
		b.Run(sc.name, func(b *testing.B) {
			p := startPeer(b, &sc)
			reqs := startBenchDispatcher(b, p, &sc)
			// Warm up: group joined, connections open, buffers grown.
			p.produce(b, benchWarmup)
			p.waitDelivered(b, benchWarmup)
			measure(b, p, reqs, func() { p.produce(b, b.N) })
		})
	}
}

// startBenchDispatcher runs a dispatcher against p until b ends and returns
// the count of its Kafka requests.
func startBenchDispatcher(b *testing.B, p *peer, sc *scheme) *kafkaRequests {
	eps := &endpointMap{m: map[string]dispatcher.Target{}}
	for i, e := range p.info.Endpoints {
		eps.set(dispatcher.Target{ID: e.ID, URL: e.URL, Secrets: []string{e.Secret}, Account: fmt.Sprintf("acct_%06d", i),
			SendTraceparent: true})
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tracer := benchTracer(b, p, logger)
	kcfg := kafkaconn.Config{Brokers: p.info.Kafka}
	reqs := &kafkaRequests{}
	cfg := dispatcher.Config{Topics: benchTopics(), AllowPrivateNetworks: true}
	if sc.ca != nil {
		cfg.EndpointCAFile = sc.ca.File
	}
	d, err := dispatcher.New(cfg,
		dispatcher.Deps{Endpoints: eps, Logger: logger, KafkaOpts: kafkaconn.Opts(kcfg, logger, reqs), Tracer: tracer})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	return reqs
}

// benchTracer is the dispatcher's tracer as hookd sets it up from the
// environment, exporting to the peer's collector: nil with tracing off.
func benchTracer(b *testing.B, p *peer, logger *slog.Logger) trace.Tracer {
	if p.info.OTLP == "" {
		return nil
	}
	b.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", p.info.OTLP+"/v1/traces")
	prov, err := tracing.Setup(context.Background(), logger)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = prov.Shutdown(context.Background()) })
	return prov.Tracer("hookd/dispatch")
}

// BenchmarkDispatcherStream is BenchmarkDispatcher with the records
// arriving while it runs, at streamRate per second, as hookbench's router
// writes them at saturation (about 7000/s on 2 cores), instead of all
// before: small fetches from many partitions, small produce batches.
func BenchmarkDispatcherStream(b *testing.B) {
	sc := scheme{name: "http"}
	p := startPeer(b, &sc)
	reqs := startBenchDispatcher(b, p, &sc)
	p.produce(b, benchWarmup)
	p.waitDelivered(b, benchWarmup)
	measure(b, p, reqs, func() {
		p.call(b, fmt.Sprintf("/stream?n=%d&from=%d&rate=%d", b.N, p.seq, streamRate), nil)
		p.seq += b.N
	})
}

const streamRate = 7000

// BenchmarkPlainSend is B0: a plain net/http loop of 256 goroutines posting
// the same signed bodies to the same receivers, with hookbench's client.
func BenchmarkPlainSend(b *testing.B) {
	for _, sc := range schemes {
		b.Run(sc.name, func(b *testing.B) { plainSend(b, &sc) })
	}
}

func plainSend(b *testing.B, sc *scheme) {
	p := startPeer(b, sc)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost, tr.MaxIdleConns = 64, 1024
	if sc.ca != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: sc.ca.Pool}
	}
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer cl.CloseIdleConnections()
	var seq atomic.Int64
	send := func(n int64) {
		var wg sync.WaitGroup
		for range 256 {
			wg.Go(func() {
				for i := seq.Add(1); i <= n; i = seq.Add(1) {
					plainPost(b, cl, p.info.Endpoints[int(i)%len(p.info.Endpoints)], fmt.Sprintf("b0_%d", i))
				}
			})
		}
		wg.Wait()
	}
	send(benchWarmup)
	p.waitDelivered(b, benchWarmup)
	seq.Store(benchWarmup)
	cpu, before, after := measure(b, p, nil, func() { send(benchWarmup + int64(b.N)) })
	b.ReportMetric(float64((cpu.Microseconds()+after.CPUMicros-before.CPUMicros))/float64(b.N), "b0_us/delivery")
}

func plainPost(b *testing.B, cl *http.Client, e peerEndpt, id string) {
	keys, err := signature.ParseSecrets([]string{e.Secret})
	if err != nil {
		b.Fatal(err)
	}
	body := benchBody(id)
	now := time.Now()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("user-agent", "hookbench")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", signature.Timestamp(now))
	req.Header.Set("webhook-signature", signature.Sign(id, now, body, keys))
	resp, err := cl.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// TestDispatcherBenchPeer is the benchmarks' peer process: kfake and the
// receivers. It runs only when re-executed by a benchmark.
func TestDispatcherBenchPeer(t *testing.T) {
	if os.Getenv(peerEnv) == "" {
		t.Skip("the dispatcher benchmarks' peer process")
	}
	if err := runPeer(); err != nil {
		fmt.Fprintln(os.Stderr, "peer:", err)
		os.Exit(1)
	}
	os.Exit(0) // no goleak: the broker and servers die with the process
}

type benchReceiver struct {
	mu        sync.RWMutex
	hooks     map[string]*standardwebhooks.Webhook
	delivered atomic.Int64
	badSig    atomic.Int64
	conns     atomic.Int64

	// streamed are the produce times of the streamed records by event
	// number; latencies, those of their deliveries.
	latMu     sync.Mutex
	streamed  map[int]time.Time
	latencies []time.Duration
}

// observe records the latency of the delivery of body's event, if it was
// streamed.
func (r *benchReceiver) observe(body []byte, now time.Time) {
	i := bytes.Index(body, []byte(`"evt_`))
	if i < 0 {
		return
	}
	digits := body[i+5:]
	if j := bytes.IndexByte(digits, '"'); j >= 0 {
		digits = digits[:j]
	}
	n, err := strconv.Atoi(string(digits))
	if err != nil {
		return
	}
	r.latMu.Lock()
	defer r.latMu.Unlock()
	if at, ok := r.streamed[n]; ok {
		delete(r.streamed, n)
		r.latencies = append(r.latencies, now.Sub(at))
	}
}

// quantile returns the q quantile of the latencies so far, in ms.
func (r *benchReceiver) quantile(q float64) float64 {
	r.latMu.Lock()
	defer r.latMu.Unlock()
	if len(r.latencies) == 0 {
		return 0
	}
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	return float64(l[int(q*float64(len(l)-1))].Microseconds()) / 1000
}

func (r *benchReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.RLock()
	wh := r.hooks[strings.TrimPrefix(req.URL.Path, "/e/")]
	r.mu.RUnlock()
	if err != nil || wh == nil || wh.Verify(body, req.Header) != nil {
		r.badSig.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.observe(body, time.Now())
	time.Sleep(benchLatency)
	w.WriteHeader(http.StatusOK)
	r.delivered.Add(1)
}

// listenPeer starts the receivers' listeners, serving https when the
// benchmark asked for it (peerTLSEnv), and returns their base URLs.
func listenPeer(srv *http.Server) ([]string, error) {
	base := "http://"
	if v := os.Getenv(peerTLSEnv); v != "" {
		parts := strings.Split(v, ",")
		cert, err := tls.LoadX509KeyPair(parts[0], parts[1])
		if err != nil {
			return nil, err
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		if parts[2] == "h1" {
			srv.TLSConfig.NextProtos = []string{"http/1.1"}
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		}
		base = "https://"
	}
	// Decided once: srv.Serve may set srv.TLSConfig itself (its HTTP/2
	// set-up), and a receiver started after the first one read it as https
	// (one receiver in four served TLS to plain-http requests).
	tlsConfig := srv.TLSConfig
	var urls []string
	for range benchReceivers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		if tlsConfig != nil {
			ln = tls.NewListener(ln, tlsConfig)
		}
		go func() { _ = srv.Serve(ln) }()
		urls = append(urls, base+ln.Addr().String())
	}
	return urls, nil
}

// discardOTLP serves an OTLP/HTTP collector on 127.0.0.1 that reads every
// export and answers success, and returns its URL.
func discardOTLP() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
	}()
	return "http://" + ln.Addr().String(), nil
}

func runPeer() error {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer c.Close()
	tcfg := benchTopics()
	names := topics.NamesFor(tcfg)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx := context.Background()
	if _, err := topics.Provision(ctx, kadm.NewClient(cl), tcfg); err != nil {
		return err
	}
	rc := &benchReceiver{hooks: map[string]*standardwebhooks.Webhook{}, streamed: map[int]time.Time{}}
	srv := &http.Server{Handler: rc, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rc.conns.Add(1)
		}
	}}
	urls, err := listenPeer(srv)
	if err != nil {
		return err
	}
	info := peerInfo{Kafka: c.ListenAddrs()}
	traced, err := tracing.Enabled(os.Getenv)
	if err != nil {
		return err
	}
	if traced {
		if info.OTLP, err = discardOTLP(); err != nil {
			return err
		}
	}
	for i := range benchEndpoints {
		e := peerEndpt{ID: fmt.Sprintf("ep_%06d", i), URL: urls[i%len(urls)] + fmt.Sprintf("/e/ep_%06d", i), Secret: endpoint.NewSecret()}
		wh, err := standardwebhooks.NewWebhook(e.Secret)
		if err != nil {
			return err
		}
		rc.hooks[e.ID] = wh
		info.Endpoints = append(info.Endpoints, e)
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	info.Control = ctl.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /stats", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(peerStats{Delivered: rc.delivered.Load(), BadSig: rc.badSig.Load(),
			Conns: rc.conns.Load(), CPUMicros: cpuNow().Microseconds(), P50Millis: rc.quantile(0.5), P99Millis: rc.quantile(0.99)})
	})
	record := func(i int) *kgo.Record {
		e := info.Endpoints[i%len(info.Endpoints)]
		id := fmt.Sprintf("evt_%d", i)
		dl := delivery.Delivery{ID: delivery.ID(id, e.ID), EventID: id, EventType: "invoice.paid", EndpointID: e.ID,
			Account: fmt.Sprintf("acct_%06d", i%len(info.Endpoints)), EventCreated: time.Now(), Attempt: 1, Body: benchBody(id)}
		if traced { // the router's fan-out span, as it would be with tracing on
			dl.Traceparent = fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
		}
		return dl.Record(names.Deliveries)
	}
	mux.HandleFunc("POST /produce", func(w http.ResponseWriter, req *http.Request) {
		n, _ := strconv.Atoi(req.URL.Query().Get("n"))
		from, _ := strconv.Atoi(req.URL.Query().Get("from"))
		recs := make([]*kgo.Record, 0, n)
		for i := from; i < from+n; i++ {
			recs = append(recs, record(i))
		}
		if err := cl.ProduceSync(req.Context(), recs...).FirstErr(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	// stream produces n records at rate per second, a 2ms share at a time,
	// as a router does under load, and answers at once.
	mux.HandleFunc("POST /stream", func(_ http.ResponseWriter, req *http.Request) {
		n, _ := strconv.Atoi(req.URL.Query().Get("n"))
		from, _ := strconv.Atoi(req.URL.Query().Get("from"))
		rate, _ := strconv.Atoi(req.URL.Query().Get("rate"))
		go func() {
			tick := time.NewTicker(2 * time.Millisecond)
			defer tick.Stop()
			start, i := time.Now(), from
			for range tick.C {
				due := from + int(time.Since(start).Seconds()*float64(rate))
				for ; i < min(due, from+n); i++ {
					r := record(i)
					rc.latMu.Lock()
					rc.streamed[i] = time.Now()
					rc.latMu.Unlock()
					cl.Produce(context.Background(), r, nil)
				}
				if i >= from+n {
					return
				}
			}
		}()
	})
	go func() { _ = http.Serve(ctl, mux) }()
	out, err := json.Marshal(info)
	if err != nil {
		return err
	}
	fmt.Printf("%s\n", out)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the benchmark closes it
	return nil
}
