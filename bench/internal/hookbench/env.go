// Package hookbench is hookd's end-to-end benchmark (bench/hookbench): it
// drives the real hookd binaries (the embedded broker and each role as its
// own process, real Postgres) with an open-loop load generator and real
// 127.0.0.1 receivers, and measures, in one run on one machine, the
// saturation throughput, latency from event commit to receiver at 50% and
// 90% of it, CPU and memory per process, memory with many endpoints,
// isolation from a hanging endpoint, healthy accounts' latency next to an
// abusive account (tenancy), and three baselines: a plain HTTP
// loop (B0), a naive one-record-at-a-time dispatcher (B1) and a River
// (Postgres queue) sender (B2, a separate module under bench/river). It
// runs on durable Postgres (fsync and synchronous_commit on) and repeats
// saturation and B2 with fsync=off (switched with ALTER SYSTEM); it
// reports Postgres rows, WAL and server CPU per delivery, each pipeline
// stage's latency at 50% of saturation (hookd_stage_latency_seconds read
// from every process), the saturation phase with 3 dispatchers, and
// connections and TLS handshakes per 1,000 deliveries with 1,000 endpoints
// on one receiver (onehost). The receivers serve https by default, with a
// CA generated for the run that the hookd processes and river-sender
// trust through SSL_CERT_FILE (Config.Scheme). It writes a Markdown
// table, a JSON file and PNG plots. It never sends a request anywhere but
// 127.0.0.1 and stops by itself.
//
// Internal: only hookd's own packages can import it.
package hookbench

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/bench/chaos"
	"github.com/hookd/hookd/internal/endpoint"
)

// Config configures a benchmark run. Zero fields take the defaults.
type Config struct {
	// DatabaseURL is a Postgres server (wal_level=logical) on which the
	// benchmark creates and drops databases of its own. Empty uses the
	// standard PG* variables (what pg_virtualenv sets).
	DatabaseURL string
	// OutboxDatabaseURL, when set, is a second Postgres server
	// (wal_level=logical) for the application's outbox: each installation
	// gets a database there too, the generator commits its outbox events
	// to it and the relay streams from it, while every other role uses
	// DatabaseURL: the deployment where the outbox is in the application's
	// database and hookd's store on a server of its own. Postgres CPU,
	// rows and WAL figures and the wait for idle count DatabaseURL's
	// server only. Defaults to none.
	OutboxDatabaseURL string
	// Out is the directory for results.md, results.json and the PNGs.
	// Defaults to "bench-results".
	Out string
	// Endpoints is the number of receiver endpoints (one account each).
	// Defaults to 1000.
	Endpoints int
	// Receivers is the number of receiver servers they are spread over.
	// Defaults to 4.
	Receivers int
	// Latency is each receiver's answer time. Defaults to 5ms.
	Latency time.Duration
	// FailRate is the share of webhook-ids answered 503 on their first
	// attempt. Defaults to 0.
	FailRate float64
	// EndpointFeatures gives every endpoint two custom headers and a
	// payload filter that every event of the run matches (issue 31's
	// goal: throughput with them within 10% of without).
	EndpointFeatures bool
	// OfferedRate is the open-loop event rate of the saturation phase; it
	// must exceed what the pipeline can do. Defaults to 15000.
	OfferedRate float64
	// Saturation is how long the saturation load is offered. Defaults to 30s.
	Saturation time.Duration
	// Phase is the length of each latency and isolation phase.
	// Defaults to 20s.
	Phase time.Duration
	// LatencySaturation, when set, stands for the saturation rate
	// (deliveries/s) that the latency phases offer 50% and 90% of, instead
	// of the rate the run measured: two builds compared at the same load.
	// Zero (the default) uses the measured rate.
	LatencySaturation float64
	// Dispatchers is the number of `hookd dispatch` processes. Defaults to 1.
	Dispatchers int
	// Partitions of the hookd topics. Defaults to 6.
	Partitions int
	// OutboxShare is the share of events written through the outbox (the
	// rest through the ingress topic). Defaults to 0.5.
	OutboxShare float64
	// MemoryEndpoints are the endpoint counts of the memory phase.
	// Defaults to 10000 and 100000.
	MemoryEndpoints []int
	// IsolationRate is the event rate of the isolation phase (100
	// endpoints). Defaults to 1000: at half the saturation rate the
	// 2-core machine is busy enough that p99 moves by itself from run to
	// run.
	IsolationRate float64
	// InsertBatch is how many events one application transaction writes,
	// the same for both systems: in the saturation phase outbox rows per
	// transaction (and records per ingress batch), in B2 River jobs per
	// InsertManyFast call. Defaults to 1000, what B2 always inserted.
	InsertBatch int
	// RiverJobs is how many deliveries B2 makes. Defaults to 40000.
	RiverJobs int
	// TenancyAbuseRate is the abusive account's events/s in the tenancy
	// phase (the healthy accounts run at IsolationRate). Defaults to 100.
	TenancyAbuseRate float64
	// TenancyAbusiveEndpoints is how many hanging endpoints the abusive
	// account has; each of its events goes to all of them. Defaults to 8.
	TenancyAbusiveEndpoints int
	// Postgres are the durability settings to run under (durable,
	// fsync-off, as-is): every phase under the first, B2 and saturation
	// again under each further one. Defaults to durable, fsync-off.
	Postgres []string
	// ScaleOutDispatchers is the number of dispatch processes of the
	// scale-out phase (saturation again, on a fresh stack); a negative
	// value skips it. Defaults to 3.
	ScaleOutDispatchers int
	// Scheme is how the receivers serve: "https" (a CA generated for the
	// run, trusted by the hookd processes and river-sender through
	// SSL_CERT_FILE, by B0 and B1 through their client's RootCAs) or
	// "http". Defaults to "https".
	Scheme string
	// OneHostEndpoints is the number of endpoints (one account each) on
	// the single receiver of the one-host phase. Defaults to 1000.
	OneHostEndpoints int
	// OneHostRate is the event rate of the one-host phase. Defaults to
	// 1000.
	OneHostRate float64
	// OneHostWarmup is how long the one-host phase offers load before it
	// starts counting connections and handshakes. Defaults to 5s.
	OneHostWarmup time.Duration
	// BurstEndpoints, BurstEvents and BurstRuns shape the burst phase:
	// BurstRuns bursts of BurstEvents events to BurstEndpoints healthy
	// endpoints (one account each). Default to 200, 30000 and 10.
	BurstEndpoints, BurstEvents, BurstRuns int
	// Skip names phases not to run (see Phases).
	Skip map[string]bool
	// Logger prints the progress line.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Out == "" {
		c.Out = "bench-results"
	}
	if c.Endpoints == 0 {
		c.Endpoints = 1000
	}
	if c.Receivers == 0 {
		c.Receivers = 4
	}
	if c.Latency == 0 {
		c.Latency = 5 * time.Millisecond
	}
	if c.OfferedRate == 0 {
		c.OfferedRate = 15000
	}
	if c.Saturation == 0 {
		c.Saturation = 30 * time.Second
	}
	if c.Phase == 0 {
		c.Phase = 20 * time.Second
	}
	if c.Dispatchers == 0 {
		c.Dispatchers = 1
	}
	if c.Partitions == 0 {
		c.Partitions = 6
	}
	if c.OutboxShare == 0 {
		c.OutboxShare = 0.5
	}
	if len(c.MemoryEndpoints) == 0 {
		c.MemoryEndpoints = []int{10000, 100000}
	}
	if c.IsolationRate == 0 {
		c.IsolationRate = 1000
	}
	if c.InsertBatch == 0 {
		c.InsertBatch = 1000
	}
	if c.RiverJobs == 0 {
		c.RiverJobs = 40000
	}
	if c.TenancyAbuseRate == 0 {
		c.TenancyAbuseRate = 100
	}
	if c.TenancyAbusiveEndpoints == 0 {
		c.TenancyAbusiveEndpoints = 8
	}
	if len(c.Postgres) == 0 {
		c.Postgres = []string{PGDurable, PGFsyncOff}
	}
	if c.ScaleOutDispatchers == 0 {
		c.ScaleOutDispatchers = 3
	}
	if c.Scheme == "" {
		c.Scheme = SchemeHTTPS
	}
	if c.BurstEndpoints == 0 {
		c.BurstEndpoints = 200
	}
	if c.BurstEvents == 0 {
		c.BurstEvents = 30000
	}
	if c.BurstRuns == 0 {
		c.BurstRuns = 10
	}
	if c.OneHostEndpoints == 0 {
		c.OneHostEndpoints = 1000
	}
	if c.OneHostRate == 0 {
		c.OneHostRate = 1000
	}
	if c.OneHostWarmup == 0 {
		c.OneHostWarmup = 5 * time.Second
	}
	if c.Skip == nil {
		c.Skip = map[string]bool{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
}

func (c *Config) validate() error {
	if c.Scheme != SchemeHTTPS && c.Scheme != SchemeHTTP {
		return fmt.Errorf("scheme %q: want %s or %s", c.Scheme, SchemeHTTPS, SchemeHTTP)
	}
	if c.LatencySaturation < 0 {
		return fmt.Errorf("latency saturation %.0f/s: must not be negative", c.LatencySaturation)
	}
	if c.InsertBatch < 1 {
		return fmt.Errorf("insert batch %d: must be at least 1", c.InsertBatch)
	}
	if c.OneHostEndpoints < 1 || c.OneHostRate <= 0 || c.OneHostWarmup < 0 {
		return fmt.Errorf("one-host phase: %d endpoints at %.0f events/s after %s warm-up: want at least 1 endpoint, a positive rate and warm-up",
			c.OneHostEndpoints, c.OneHostRate, c.OneHostWarmup)
	}
	for name := range c.Skip {
		if !slices.Contains(Phases, name) {
			return fmt.Errorf("phase %q: want one of %s", name, strings.Join(Phases, ", "))
		}
	}
	return nil
}

// Phases are the phase names --skip and --phases take. latency, scaleout,
// b0, b1, b2 and the further Postgres settings run on (or after) the
// saturation phase's stack: skipping saturation skips them too.
var Phases = []string{"saturation", "latency", "scaleout", "b0", "b1", "b2", "isolation", "tenancy", "memory", "onehost", "burst"}

// ParseSkip turns --skip and --phases (comma-separated phase names, either
// may be empty) into Config.Skip: the phases in skip, and with phases
// non-empty every phase not in it.
func ParseSkip(skip, phases string) (map[string]bool, error) {
	out := map[string]bool{}
	names := func(list string) ([]string, error) {
		var ns []string
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if !slices.Contains(Phases, n) {
				return nil, fmt.Errorf("unknown phase %q: want one of %s", n, strings.Join(Phases, ", "))
			}
			ns = append(ns, n)
		}
		return ns, nil
	}
	sk, err := names(skip)
	if err != nil {
		return nil, err
	}
	run, err := names(phases)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(phases) != "" && len(run) == 0 {
		return nil, fmt.Errorf("--phases %q names no phase", phases)
	}
	for _, p := range Phases {
		if len(run) > 0 && !slices.Contains(run, p) {
			out[p] = true
		}
	}
	for _, n := range sk {
		out[n] = true
	}
	return out, nil
}

// endpointInfo is one registered endpoint.
type endpointInfo struct {
	ID, Account, URL, Secret string
	rc                       *chaos.Receiver
}

// stack is one fresh hookd installation: a database, a broker data
// directory, the processes, the receivers and the endpoints.
type stack struct {
	cfg     *Config
	dbURL   string
	dropDB  func()
	cluster *chaos.Cluster
	pool    *pgxpool.Pool
	// outbox is the generator's pool for outbox events: pool, or the
	// OutboxDatabaseURL database's.
	outbox       *pgxpool.Pool
	dropOutboxDB func()
	kafka        *kgo.Client
	receivers    []*chaos.Receiver
	// conns counts each receiver's connections and TLS handshakes.
	conns     []*connStats
	endpoints []endpointInfo
	byID      map[string]*endpointInfo
	dir       string
}

type stackParams struct {
	endpoints  int
	partitions int
	// dispatchers overrides Config.Dispatchers.
	dispatchers int
	// behave overrides the behaviour of some endpoints (by index).
	behave  map[int]chaos.Behavior
	timeout time.Duration
	// noStart registers endpoints without starting the roles.
	noStart bool
	// receivers overrides Config.Receivers.
	receivers int
}

// benchHeaders and benchFilter are every endpoint's with
// --endpoint-features: two custom headers, and a filter that the load's
// events (type invoice.paid, data with a pad string) all match, so the run
// makes the same deliveries as without.
var (
	benchHeaders = map[string]string{"X-Tenant": "hookbench", "X-Webhook-Source": "hookd"}
	benchFilter  = map[string]any{"type": map[string]any{"$prefix": "invoice."}, "data": map[string]any{"pad": map[string]any{"$exists": true}}}
)

func (b *bench) newStack(ctx context.Context, p stackParams) (*stack, error) {
	s := &stack{cfg: b.cfg, byID: map[string]*endpointInfo{}}
	dbURL, drop, err := createDatabase(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	s.dbURL, s.dropDB = dbURL, drop
	s.dir, err = os.MkdirTemp("", "hookbench-")
	if err != nil {
		return nil, err
	}
	if p.timeout == 0 {
		p.timeout = 10 * time.Second
	}
	if p.dispatchers == 0 {
		p.dispatchers = b.cfg.Dispatchers
	}
	if p.receivers == 0 {
		p.receivers = b.cfg.Receivers
	}
	var env []string
	if b.tls != nil {
		// The way an operator makes hookd trust a private CA, without a
		// hookd flag.
		env = append(env, "SSL_CERT_FILE="+b.tls.CAFile)
	}
	relayURL, err := s.outboxDatabase(ctx)
	if err != nil {
		return nil, err
	}
	s.cluster, err = chaos.NewCluster(chaos.ClusterConfig{Bin: b.bin, DatabaseURL: dbURL, Dir: s.dir,
		Partitions: p.partitions, Dispatchers: p.dispatchers, RetrySchedule: "1s,2s,4s,8s",
		RequestTimeout: p.timeout, LogLevel: "warn", Env: env, RelayDatabaseURL: relayURL})
	if err != nil {
		return nil, err
	}
	if err := s.cluster.Migrate(ctx); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 16
	s.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	if s.outbox = s.pool; relayURL != "" {
		if s.outbox, err = pgxpool.New(ctx, relayURL); err != nil {
			return nil, err
		}
	}
	for range p.receivers {
		st := newConnStats()
		opts := chaos.ReceiverOptions{ConnState: st.connState}
		if b.tls != nil {
			opts.TLS = b.tls.serverConfig(st)
		}
		rc, err := chaos.StartReceiver(opts)
		if err != nil {
			return nil, err
		}
		s.receivers = append(s.receivers, rc)
		s.conns = append(s.conns, st)
	}
	rows := make([][]any, 0, p.endpoints)
	s.endpoints = make([]endpointInfo, p.endpoints)
	for i := range p.endpoints {
		rc := s.receivers[i%len(s.receivers)]
		id := fmt.Sprintf("ep_%06d", i)
		secret := endpoint.NewSecret()
		spec := chaos.EndpointSpec{ID: id, Secret: secret, Behave: chaos.BehaveOK, Latency: b.cfg.Latency}
		if bh, ok := p.behave[i]; ok {
			spec.Behave, spec.FailAttempts = bh, -1
		} else if b.cfg.FailRate > 0 {
			spec.Behave, spec.FailAttempts, spec.FailEvery = chaos.Behave5xx, 1, int(1/b.cfg.FailRate)
		}
		u, err := rc.Add(spec)
		if err != nil {
			return nil, err
		}
		acct := fmt.Sprintf("acct_%06d", i)
		s.endpoints[i] = endpointInfo{ID: id, Account: acct, URL: u, Secret: secret, rc: rc}
		s.byID[id] = &s.endpoints[i]
		row := []any{id, acct, u, []string{secret}}
		if b.cfg.EndpointFeatures {
			row = append(row, benchHeaders, benchFilter)
		}
		rows = append(rows, row)
	}
	cols := []string{"id", "account", "url", "secrets"}
	if b.cfg.EndpointFeatures {
		cols = append(cols, "headers", "filter")
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"webhooks", "endpoints"}, cols, pgx.CopyFromRows(rows)); err != nil {
		return nil, fmt.Errorf("registering endpoints: %w", err)
	}
	if !p.noStart {
		if err := s.cluster.Start(ctx); err != nil {
			return nil, err
		}
	} else if err := s.cluster.StartProcess(ctx, chaos.RoleBroker); err != nil {
		return nil, err
	}
	s.kafka, err = kgo.NewClient(kgo.SeedBrokers(s.cluster.KafkaAddr), kgo.ProducerLinger(2*time.Millisecond))
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *stack) close() {
	if s.kafka != nil {
		s.kafka.Close()
	}
	if s.cluster != nil {
		s.cluster.Close()
	}
	for _, rc := range s.receivers {
		rc.Close()
	}
	if s.outbox != nil && s.outbox != s.pool {
		s.outbox.Close()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.dropDB != nil {
		s.dropDB()
	}
	if s.dropOutboxDB != nil {
		s.dropOutboxDB()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// outboxDatabase creates the installation's outbox database on
// Config.OutboxDatabaseURL's server and returns its URL, or "" without
// one (the outbox is then in the store's database).
func (s *stack) outboxDatabase(ctx context.Context) (string, error) {
	if s.cfg.OutboxDatabaseURL == "" {
		return "", nil
	}
	u, drop, err := createDatabase(ctx, s.cfg.OutboxDatabaseURL)
	if err != nil {
		return "", fmt.Errorf("outbox server: %w", err)
	}
	s.dropOutboxDB = drop
	return u, nil
}

func (s *stack) accounts() []string {
	out := make([]string, len(s.endpoints))
	for i, e := range s.endpoints {
		out[i] = e.Account
	}
	rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// firstOK merges every receiver's first-2xx times by (endpoint, id).
func (s *stack) firstOK() map[[2]string]time.Time {
	out := map[[2]string]time.Time{}
	for _, rc := range s.receivers {
		for k, v := range rc.FirstOK() {
			out[k] = v
		}
	}
	return out
}

// okCount is how many (endpoint, webhook-id) pairs the receivers answered
// 2xx, the previous phase's stragglers included: the size of firstOK
// without building it.
func (s *stack) okCount() int {
	n := 0
	for _, rc := range s.receivers {
		n += rc.OKCount()
	}
	return n
}

func (s *stack) resetReceivers() {
	for _, rc := range s.receivers {
		rc.Reset()
	}
}

// createDatabase creates a database on the server of base and returns its
// URL and a function that drops it.
func createDatabase(ctx context.Context, base string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", nil, fmt.Errorf("connecting to %s: %w", redact(base), err)
	}
	defer conn.Close(ctx)
	name := fmt.Sprintf("hookbench_%d_%d", time.Now().UnixNano(), rand.IntN(1000))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	cfg, err := pgx.ParseConfig(base)
	if err != nil {
		return "", nil, err
	}
	u := url.URL{Scheme: "postgres", Path: "/" + name, User: url.UserPassword(cfg.User, cfg.Password)}
	if cfg.Password == "" {
		u.User = url.User(cfg.User)
	}
	q := url.Values{}
	if strings.HasPrefix(cfg.Host, "/") {
		q.Set("host", cfg.Host)
		q.Set("port", fmt.Sprint(cfg.Port))
	} else {
		u.Host = fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
	}
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active", name)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(database url)"
	}
	return p.Redacted()
}
