package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/retrytiers"
)

// docMetric is one row of docs/metrics.md.
type docMetric struct {
	name, typ string
	labels    []string
	// onEvent: the doc says the metric appears only after its first
	// occurrence (a vector with no label value yet).
	onEvent bool
}

var docRow = regexp.MustCompile("^\\| `([a-z_]+)`( †)? \\| (counter|gauge|histogram|summary) \\| ([^|]*) \\|")

func readMetricsDoc(t *testing.T) map[string]docMetric {
	t.Helper()
	b, err := os.ReadFile("../../../docs/metrics.md")
	require.NoError(t, err)
	out := map[string]docMetric{}
	for _, line := range strings.Split(string(b), "\n") {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		d := docMetric{name: m[1], typ: m[3], onEvent: m[2] != ""}
		for _, l := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(m[4], -1) {
			d.labels = append(d.labels, l[1])
		}
		sort.Strings(d.labels)
		require.NotContains(t, out, d.name, "docs/metrics.md lists %s twice", d.name)
		out[d.name] = d
	}
	require.NotEmpty(t, out, "docs/metrics.md has no metric rows")
	require.Contains(t, string(b), "`go_*`", "the Go runtime collector is documented as a group")
	require.Contains(t, string(b), "`process_*`", "the process collector is documented as a group")
	return out
}

// unboundedLabels would grow with the number of endpoints, events or
// accounts; none may appear on any metric.
var unboundedLabels = []string{"endpoint", "endpoint_id", "event", "event_id", "delivery", "delivery_id", "account", "url", "host", "status_code"}

// TestMetricsDocMatchesLiveRegistry runs `hookd run` (every role, embedded
// broker, real Postgres) in process, sends traffic that exercises every
// outcome (delivered, retried through both tiers, a breaker opening, 410
// gone and the endpoint disabled, an invalid envelope), then scrapes its
// /metrics over HTTP and compares the metric families with docs/metrics.md
// both ways: names, types and label names. Metrics the doc marks † appear
// only after their first occurrence (a failure the test cannot provoke);
// for those the test proves they are registered.
func TestMetricsDocMatchesLiveRegistry(t *testing.T) {
	t.Parallel()
	doc := readMetricsDoc(t)
	for _, d := range doc {
		for _, l := range d.labels {
			require.NotContains(t, unboundedLabels, l, "%s has an unbounded label", d.name)
		}
	}

	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	serve := func(code int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	for _, ep := range []struct{ id, url string }{
		{"ep_ok", serve(http.StatusOK)},
		{"ep_fail", serve(http.StatusServiceUnavailable)},
		{"ep_gone", serve(http.StatusGone)},
	} {
		_, err := db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: ep.id, Account: "acct_1", URL: ep.url + "/hook", Secrets: []string{endpoint.NewSecret()}})
		require.NoError(t, err)
	}

	kafkaAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("hookd"), kong.Vars{"retry_schedule": retrytiers.DefaultSchedule})
	require.NoError(t, err)
	_, err = parser.Parse([]string{"run", "--database-url", db.URL, "--data-dir", t.TempDir(), "--kafka-listen", kafkaAddr,
		"--listen", httpAddr, "--partitions", "2", "--retry-schedule", "1s,2s", "--allow-private-networks", "--no-migrate",
		"--relay-slot", db.Name}) // slots are cluster-wide
	require.NoError(t, err)
	cfg, err := cli.Run.daemonConfig()
	require.NoError(t, err)
	emb := cli.Run.embeddedConfig()
	cfg.Embedded = &emb
	regs := make(chan *prometheus.Registry, 1)
	probe := func(_ context.Context, env *daemon.Env) (daemon.Role, error) {
		regs <- env.Registry
		return roleFunc{"registry-probe", func(ctx context.Context) error { <-ctx.Done(); return nil }}, nil
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	go func() { done <- daemon.Run(runCtx, cfg, logger, append(cli.Run.roles(), probe)) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("hookd run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("hookd run did not stop within 30s")
		}
	})
	var reg *prometheus.Registry
	select {
	case reg = <-regs:
	case err := <-done:
		t.Fatalf("hookd run: %v", err)
	case <-ctx.Done():
		t.Fatal("hookd did not start")
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	require.NoError(t, err)
	defer cl.Close()
	// 25 events: enough failures on ep_fail to trip its breaker (20
	// requests in the window, half failed), one invalid envelope.
	var recs []*kgo.Record
	for i := range 25 {
		recs = append(recs, &kgo.Record{Topic: "webhooks.events", Value: fmt.Appendf(nil, `{"account":"acct_1","type":"test.metrics","data":{"n":%d}}`, i)})
	}
	recs = append(recs, &kgo.Record{Topic: "webhooks.events", Value: []byte(`not json`)})
	require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
	_, err = db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.outbox (account, type, payload) VALUES ('acct_1', 'test.outbox', '{}')`)
	require.NoError(t, err)

	var families map[string]*dto.MetricFamily
	for {
		families = scrape(t, ctx, httpAddr)
		var missing []string
		for name, d := range doc {
			if !d.onEvent && families[name] == nil {
				missing = append(missing, name)
			}
		}
		// The group metrics name the groups the roles really join: in
		// hookd run each has one member.
		for _, g := range kafkaconn.Groups {
			if groupMembers(families, g) != 1 {
				missing = append(missing, "hookd_kafka_consumer_group_members{group="+g+"} == 1")
			}
		}
		if len(missing) == 0 {
			break
		}
		if ctx.Err() != nil {
			sort.Strings(missing)
			t.Fatalf("documented metrics never appeared on /metrics: %v", missing)
		}
		time.Sleep(200 * time.Millisecond) // polling interval, not synchronisation
	}

	var undocumented, wrong []string
	for name, f := range families {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		d, ok := doc[name]
		if !ok {
			undocumented = append(undocumented, describe(f))
			continue
		}
		if typ := strings.ToLower(f.GetType().String()); d.typ != typ || !slices.Equal(d.labels, labelNames(f)) {
			wrong = append(wrong, fmt.Sprintf("%s: doc says %s %v, /metrics has %s", name, d.typ, d.labels, describe(f)))
		}
	}
	sort.Strings(undocumented)
	sort.Strings(wrong)
	require.Empty(t, undocumented, "metrics exported but missing from docs/metrics.md")
	require.Empty(t, wrong, "metrics whose type or labels differ from docs/metrics.md")

	for name, d := range doc {
		if !d.onEvent || families[name] != nil {
			continue
		}
		probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "doc test probe"})
		if err := reg.Register(probe); err == nil {
			reg.Unregister(probe)
			t.Errorf("docs/metrics.md lists %s (†), but nothing registers it", name)
		}
	}
}

func scrape(t *testing.T, ctx context.Context, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

func labelNames(f *dto.MetricFamily) []string {
	var out []string
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if !slices.Contains(out, l.GetName()) {
				out = append(out, l.GetName())
			}
		}
	}
	sort.Strings(out)
	return out
}

func describe(f *dto.MetricFamily) string {
	return fmt.Sprintf("%s %s %v: %s", f.GetName(), strings.ToLower(f.GetType().String()), labelNames(f), f.GetHelp())
}

func groupMembers(fams map[string]*dto.MetricFamily, group string) float64 {
	for _, m := range fams["hookd_kafka_consumer_group_members"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "group" && l.GetValue() == group {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
