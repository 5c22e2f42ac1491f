package portal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/producer/router"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/maintenance"
)

// hookReceiver is a real receiver on loopback that records every request
// (type, id, body, whether its signature verifies) and answers 503 while
// failing.
type hookReceiver struct {
	srv  *httptest.Server
	wh   *standardwebhooks.Webhook
	fail atomic.Bool
	mu   sync.Mutex
	got  []hookRequest
}

type hookRequest struct {
	ID, Type string
	Body     []byte
	Verified bool
}

func newHookReceiver(t *testing.T) (*hookReceiver, string) {
	t.Helper()
	secret := endpoint.NewSecret()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	rc := &hookReceiver{wh: wh}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var env struct {
			Type string `json:"type"`
		}
		_ = json.Unmarshal(body, &env)
		rc.mu.Lock()
		rc.got = append(rc.got, hookRequest{ID: r.Header.Get("webhook-id"), Type: env.Type, Body: body,
			Verified: rc.wh.Verify(body, r.Header) == nil})
		rc.mu.Unlock()
		if rc.fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(rc.srv.Close)
	return rc, secret
}

// ofType returns the requests of event types starting with prefix.
func (rc *hookReceiver) ofType(prefix string) []hookRequest {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []hookRequest
	for _, g := range rc.got {
		if strings.HasPrefix(g.Type, prefix) {
			out = append(out, g)
		}
	}
	return out
}

// alertData decodes the data of an alert webhook.
func alertData(t *testing.T, body []byte) maintenance.AlertData {
	t.Helper()
	var env struct {
		Data maintenance.AlertData `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &env))
	return env.Data
}

// offsetClock is the monitor's clock: real time moved by an offset the test
// sets (to close the current hour for the dead-letter aggregation).
type offsetClock struct{ off atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

// AfterFunc runs f after d of real time.
func (c *offsetClock) AfterFunc(d time.Duration, f func()) clock.Timer { return time.AfterFunc(d, f) }

// startAlertRoles runs what the pipeline needs beyond startPipeline for
// events produced to webhooks.events: the router, and the endpoint-health
// monitor with a short warn-after.
func (b *bundle) startAlertRoles(t *testing.T, clk *offsetClock) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	opts := []kgo.Opt{kgo.SeedBrokers(b.cluster.Addrs...)}
	x, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: b.db.Store, Logger: logger})
	require.NoError(t, err)
	rt, err := router.New(router.Config{Topics: b.names}, router.Deps{Endpoints: x, KafkaOpts: opts, Logger: logger})
	require.NoError(t, err)
	mon, err := maintenance.NewMonitor(maintenance.MonitorConfig{OpsTopic: b.names.Ops, EventsTopic: b.names.Events,
		DisableAfter: 100 * time.Hour, WarnAfter: time.Second, Interval: 100 * time.Millisecond, PortalBaseURL: "https://hooks.example.com"},
		maintenance.MonitorDeps{Store: b.db.Store, Logger: logger, Registerer: reg, KafkaOpts: opts, Clock: clk})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = x.Run(ctx) })
	wg.Go(func() { _ = rt.Run(ctx) })
	wg.Go(func() { _ = mon.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// produceEvent writes an application event envelope to webhooks.events.
func (b *bundle) produceEvent(t *testing.T, account, id, typ string) {
	t.Helper()
	v, err := json.Marshal(map[string]any{"id": id, "account": account, "type": typ, "data": map[string]any{"n": id}})
	require.NoError(t, err)
	require.NoError(t, b.cluster.Client(t).ProduceSync(context.Background(), &kgo.Record{Topic: b.names.Events, Key: []byte(account), Value: v}).FirstErr())
}

// TestOwnerAlerts runs the whole path: an endpoint of the account fails
// past warn-after, and the account's endpoint subscribed to hookd.* gets
// one signed hookd.endpoint.failing for the episode, then
// hookd.endpoint.recovered after a success, then one
// hookd.delivery.dead_lettered with the hour's count. The failing endpoint
// (subscribed to hookd.* too) never gets alerts about itself; a "*"
// endpoint gets none. Every attempt row names its destination and the
// SHA-256 of the body the receiver got.
func TestOwnerAlerts(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{schedule: "1s"})
	bad, badSecret := newHookReceiver(t)
	ops, opsSecret := newHookReceiver(t)
	star, starSecret := newHookReceiver(t)
	ctx := context.Background()
	mk := func(rc *hookReceiver, secret string, types ...string) endpoint.Endpoint {
		e, err := b.db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: endpoint.NewID(), Account: "acct_alerts",
			URL: rc.srv.URL + "/hook", Secrets: []string{secret}, EventTypes: types})
		require.NoError(t, err)
		return e
	}
	epBad := mk(bad, badSecret, "invoice.*", "hookd.*")
	epOps := mk(ops, opsSecret, "hookd.*")
	epStar := mk(star, starSecret, "*")
	bad.fail.Store(true)
	clk := &offsetClock{}
	b.startPipeline(t)
	b.startAlertRoles(t, clk)

	for _, id := range []string{"evt_a1", "evt_a2", "evt_a3"} {
		b.produceEvent(t, "acct_alerts", id, "invoice.paid")
	}
	wait.For(t, 30*time.Second, "one hookd.endpoint.failing at the hookd.* endpoint", func() bool {
		return len(ops.ofType("hookd.endpoint.failing")) >= 1
	})
	f := ops.ofType("hookd.endpoint.failing")[0]
	require.True(t, f.Verified, "the alert is signed with the endpoint's secret")
	require.Equal(t, "hookd.endpoint.failing:"+epBad.ID+":", f.ID[:len("hookd.endpoint.failing:"+epBad.ID+":")])
	fd := alertData(t, f.Body)
	require.Equal(t, epBad.ID, fd.EndpointID)
	require.False(t, fd.FailingSince.IsZero())
	require.Equal(t, 503, fd.LastStatus)
	require.Equal(t, "http_5xx", fd.LastErrorClass)
	require.Equal(t, "https://hooks.example.com/portal/endpoints/"+epBad.ID, fd.PortalURL)
	require.NotContains(t, string(f.Body), badSecret)
	require.NotContains(t, string(f.Body), bad.srv.URL, "no endpoint URL in alerts")

	// All three deliveries to the failing endpoint are dead-lettered (one
	// retry tier), then it recovers.
	wait.For(t, 30*time.Second, "3 dead letters", func() bool {
		n, err := b.db.Store.CountDeadLetters(ctx, "acct_alerts", []string{epBad.ID}, time.Now())
		require.NoError(t, err)
		return n[epBad.ID].LastDay == 3
	})
	// The portal's banners: failing since, dead letters of the last hour
	// and day; the delivery detail shows where it was sent and the digest.
	c := b.client(t)
	require.Equal(t, 200, c.login(b.link(t, "acct_alerts", "", "read", time.Hour)).Status)
	for _, path := range []string{"/portal/", "/portal/endpoints/" + epBad.ID} {
		p := c.get(path)
		require.Equal(t, 200, p.Status, p.Body)
		require.Contains(t, p.Body, "Failing since", path)
		require.Contains(t, p.Body, "3 dead letter(s) in the last hour, 3 in the last 24 h", path)
	}
	p := c.get("/portal/deliveries/" + delivery.ID("evt_a1", epBad.ID))
	require.Equal(t, 200, p.Status, p.Body)
	require.Contains(t, p.Body, "Sent to:")
	require.Contains(t, p.Body, bad.srv.URL+"/hook")
	for _, g := range bad.ofType("invoice.") {
		if g.ID == "evt_a1" {
			sum := sha256.Sum256(g.Body)
			require.Contains(t, p.Body, hex.EncodeToString(sum[:]))
		}
	}

	bad.fail.Store(false)
	b.produceEvent(t, "acct_alerts", "evt_ok", "invoice.paid")
	wait.For(t, 30*time.Second, "hookd.endpoint.recovered", func() bool {
		return len(ops.ofType("hookd.endpoint.recovered")) == 1
	})
	r := ops.ofType("hookd.endpoint.recovered")[0]
	require.True(t, r.Verified)
	require.True(t, alertData(t, r.Body).FailingSince.Equal(fd.FailingSince), "recovered pairs with the failing episode")
	require.Len(t, ops.ofType("hookd.endpoint.failing"), 1, "once per episode")

	// The hour closes: one aggregated dead_lettered event with the count.
	clk.off.Store(int64(2 * time.Hour))
	wait.For(t, 30*time.Second, "hookd.delivery.dead_lettered", func() bool {
		return len(ops.ofType("hookd.delivery.dead_lettered")) >= 1
	})
	dl := ops.ofType("hookd.delivery.dead_lettered")
	require.Len(t, dl, 1, "aggregated: one event for the hour")
	dd := alertData(t, dl[0].Body)
	require.Equal(t, epBad.ID, dd.EndpointID)
	require.Equal(t, 3, dd.Count)
	require.ElementsMatch(t, []string{"evt_a1", "evt_a2", "evt_a3"}, dd.SampleEventIDs)
	require.Contains(t, dd.PortalURL, "/portal/deliveries?")

	require.Empty(t, bad.ofType("hookd."), "an alert about an endpoint never goes to it")
	require.Empty(t, star.ofType("hookd."), "a * subscription receives no operational events")
	require.Len(t, star.ofType("invoice."), 4, "the * endpoint got the application's events")

	// Evidence: every attempt row that made a request names where it went
	// and the digest of the bytes the receiver got.
	for _, rc := range []struct {
		r  *hookReceiver
		ep endpoint.Endpoint
	}{{bad, epBad}, {star, epStar}, {ops, epOps}} {
		for _, g := range rc.r.ofType("") {
			want := sha256.Sum256(g.Body)
			id := delivery.ID(g.ID, rc.ep.ID)
			var atts []store.Attempt
			wait.For(t, 20*time.Second, "attempt rows of "+id, func() bool {
				var err error
				atts, err = b.db.Store.AttemptsOfDelivery(ctx, "acct_alerts", id, 100)
				require.NoError(t, err)
				return len(atts) > 0
			})
			for _, a := range atts {
				require.Equal(t, rc.r.srv.URL+"/hook", a.Destination)
				require.Equal(t, hex.EncodeToString(want[:]), a.BodySHA256)
			}
		}
	}
}
