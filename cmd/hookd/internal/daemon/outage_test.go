package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/internal/embedded"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

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

func (b *logBuffer) lines(substr string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// proc is a daemon.Run in the background, as `hookd run` runs it.
type proc struct {
	base string // http://host:port
	logs *logBuffer
	done chan error
}

func start(t *testing.T, ctx context.Context, cfg daemon.Config, roles ...daemon.RoleFactory) *proc {
	t.Helper()
	p := &proc{base: "http://" + cfg.HTTP.Listen, logs: &logBuffer{}, done: make(chan error, 1)}
	logger := slog.New(slog.NewTextHandler(p.logs, nil))
	go func() { p.done <- daemon.Run(ctx, cfg, logger, roles) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process log:\n%s", strings.Join(p.logs.lines(""), "\n"))
		}
	})
	return p
}

// returned reports whether Run has returned, and with what.
func (p *proc) returned() (error, bool) {
	select {
	case err := <-p.done:
		p.done <- err
		return err, true
	default:
		return nil, false
	}
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("daemon.Run did not return")
		return nil
	}
}

// readyz returns /readyz's status and body, or 0 while nothing listens.
func (p *proc) readyz(t *testing.T) (int, map[string]string) {
	t.Helper()
	res, err := http.Get(p.base + "/readyz")
	if err != nil {
		return 0, nil
	}
	defer res.Body.Close()
	var body map[string]string
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return res.StatusCode, body
}

func (p *proc) metric(t *testing.T, line string) bool {
	t.Helper()
	res, err := http.Get(p.base + "/metrics")
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(line) + `$`).Match(b)
}

// A role that returns nil before shutdown makes the process not ready at
// once, while its other roles drain, and then fail with ErrRoleStopped
// (which the CLI turns into a non-zero exit), not a start-up error.
func TestRoleStoppingEarlyIsNotReady(t *testing.T) {
	cfg := config(t)
	quit, release := make(chan struct{}), make(chan struct{})
	quitter := role("quitter", func(ctx context.Context) error {
		select {
		case <-quit:
		case <-ctx.Done():
		}
		return nil
	})
	slow := role("slow-drainer", func(ctx context.Context) error {
		<-ctx.Done()
		<-release
		return nil
	})
	p := start(t, context.Background(), cfg, quitter, slow)
	wait.For(t, time.Minute, "ready", func() bool { s, _ := p.readyz(t); return s == http.StatusOK })

	close(quit)
	wait.For(t, 10*time.Second, "not ready", func() bool { s, _ := p.readyz(t); return s == http.StatusServiceUnavailable })
	_, body := p.readyz(t)
	require.Equal(t, "quitter: "+daemon.ErrRoleStopped.Error(), body["roles"])
	close(release)

	err := p.wait(t)
	require.ErrorIs(t, err, daemon.ErrRoleStopped)
	var se *daemon.StartupError
	require.False(t, errors.As(err, &se), "a start-up error exits 2; a lost role exits 1")
	require.False(t, errors.Is(err, context.Canceled), "context.Canceled exits 0")
}

// outageCluster is a kfake broker that can become unreachable for every
// client (down: each request's connection is closed), and can refuse the
// router's deliveries only (blockDeliveries), so that the router holds a
// batch when the outage starts.
type outageCluster struct {
	*kafkatest.Cluster
	down, blockDeliveries atomic.Bool
	blocked               atomic.Int64
	deliveries            string
	deliveriesID          atomic.Pointer[[16]byte]
}

func newOutageCluster(t *testing.T, deliveries string) *outageCluster {
	t.Helper()
	c := &outageCluster{Cluster: kafkatest.New(t), deliveries: deliveries}
	c.Control(func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.down.Load() {
			return nil, errors.New("injected outage"), true
		}
		if pr, ok := kreq.(*kmsg.ProduceRequest); ok && c.blockDeliveries.Load() {
			for _, pt := range pr.Topics {
				if id := c.deliveriesID.Load(); pt.Topic == c.deliveries || (id != nil && pt.TopicID == *id) {
					c.blocked.Add(1)
					return nil, errors.New("injected outage"), true
				}
			}
		}
		return nil, nil, false
	})
	return c
}

// routerRoles are the endpoint index and a router with a 1s DrainTimeout.
func routerRoles(drain time.Duration) []daemon.RoleFactory {
	var idx *endpoint.Index
	index := func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		var err error
		idx, err = endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: env.Store, Logger: env.Logger, Registerer: env.Registry})
		if err != nil {
			return nil, err
		}
		return roleFunc{"endpoint-index", idx.Run}, nil
	}
	route := func(ctx context.Context, env *daemon.Env) (daemon.Role, error) {
		r, err := router.New(router.Config{Topics: env.Names, DrainTimeout: drain}, router.Deps{Endpoints: idx,
			KafkaOpts: env.KafkaOptsFor("router"), ChangelogKafkaOpts: env.KafkaOpts, // without kprom: it is per client
			Logger: env.Logger.With("role", "router"), Registerer: env.Registry})
		if err != nil {
			return nil, err
		}
		return roleFunc{"router", r.Run}, nil
	}
	return []daemon.RoleFactory{index, route}
}

// A Kafka outage longer than the router's DrainTimeout, starting while the
// router holds a batch, costs readiness and latency, not the process:
// /readyz answers 503 with the reason, one WARN, the metrics count the
// outage, then /readyz is 200 again, the event is fanned out and the
// process is still running.
func TestKafkaOutageIsNotReadyThenRecovers(t *testing.T) {
	const drain = time.Second
	tc := topics.Config{Partitions: 2, ReplicationFactor: 1, MinInsyncReplicas: 1}
	names := topics.NamesFor(tc)
	db := pgtest.New(t)
	_, err := db.Store.CreateEndpoint(context.Background(), endpoint.Endpoint{ID: "ep_1", Account: "acct_1", URL: "http://127.0.0.1:1/",
		Secrets: []string{endpoint.NewSecret()}, Status: endpoint.StatusActive})
	require.NoError(t, err)
	k := newOutageCluster(t, names.Deliveries)
	cfg := daemon.Config{
		Kafka: kafkaconn.Config{Brokers: k.Addrs}, Postgres: store.Config{DatabaseURL: db.URL}, Topics: tc,
		HTTP:       api.Config{Listen: fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))},
		KafkaProbe: kafkaconn.MonitorConfig{Interval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := start(t, ctx, cfg, routerRoles(drain)...)
	wait.For(t, time.Minute, "ready", func() bool { s, _ := p.readyz(t); return s == http.StatusOK })

	cl := k.Client(t)
	td, err := kadm.NewClient(cl).ListTopics(context.Background(), names.Deliveries)
	require.NoError(t, err)
	id := td[names.Deliveries].ID
	idb := [16]byte(id)
	k.deliveriesID.Store(&idb)
	k.blockDeliveries.Store(true)
	require.NoError(t, cl.ProduceSync(context.Background(), &kgo.Record{Topic: names.Events,
		Value: []byte(`{"id":"evt_1","account":"acct_1","type":"invoice.paid"}`)}).FirstErr())
	wait.For(t, 30*time.Second, "the router to hold a batch", func() bool { return k.blocked.Load() > 0 })

	outage := time.Now()
	k.down.Store(true)
	wait.For(t, 10*time.Second, "not ready", func() bool { s, _ := p.readyz(t); return s == http.StatusServiceUnavailable })
	asked := time.Now()
	_, body := p.readyz(t)
	took := time.Since(asked)
	require.Regexp(t, `^unreachable since \S+Z \(\d+s\): .+`, body["kafka"])
	t.Logf("/readyz during the outage (answered in %s): %v", took, body)
	wait.For(t, 30*time.Second, "an outage of twice the DrainTimeout", func() bool { return time.Since(outage) > 2*drain })
	if err, ok := p.returned(); ok {
		t.Fatalf("the process stopped during the outage: %v", err)
	}
	require.True(t, p.metric(t, "hookd_kafka_reachable 0"))

	k.down.Store(false)
	k.blockDeliveries.Store(false)
	wait.For(t, 30*time.Second, "ready again", func() bool { s, _ := p.readyz(t); return s == http.StatusOK })
	require.True(t, p.metric(t, "hookd_kafka_reachable 1"))
	require.True(t, p.metric(t, "hookd_kafka_outages_total 1"))
	warns := p.logs.lines("kafka unreachable")
	require.Len(t, warns, 1, "one WARN per outage")
	t.Logf("WARN: %s", warns[0])
	t.Logf("INFO: %s", p.logs.lines("kafka reachable again"))

	consumer := k.Client(t, kgo.ConsumeTopics(names.Deliveries), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	pollCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	recs := consumer.PollFetches(pollCtx).Records()
	require.NotEmpty(t, recs, "the event held through the outage is fanned out")
	require.Equal(t, "ep_1", string(recs[0].Key))
	if err, ok := p.returned(); ok {
		t.Fatalf("the process stopped after the outage: %v", err)
	}
	cancel()
	require.NoError(t, p.wait(t))
}

// `hookd run` on the embedded broker gets the same outage monitor, metrics
// and readiness checks as roles given --brokers: the broker is only where
// the addresses come from.
func TestEmbeddedBrokerIsMonitoredAsBrokersAre(t *testing.T) {
	cfg := config(t)
	cfg.Kafka = kafkaconn.Config{}
	cfg.Embedded = &embedded.Config{DataDir: t.TempDir(), Listen: fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan struct{})
	p := start(t, ctx, cfg, blocker(stopped))
	wait.For(t, time.Minute, "ready", func() bool { s, _ := p.readyz(t); return s == http.StatusOK })
	_, body := p.readyz(t)
	require.Equal(t, map[string]string{"kafka": "ok", "postgres": "ok", "roles": "ok"}, body)
	require.True(t, p.metric(t, "hookd_kafka_reachable 1"))
	require.True(t, p.metric(t, "hookd_kafka_outages_total 0"))
	cancel()
	require.NoError(t, p.wait(t))
	<-stopped
}
