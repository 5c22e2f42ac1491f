package portal

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/attemptlog"
)

const testAdminToken = "portal-admin-token-for-tests"

// bundle is what a portal test needs: Postgres, kfake, the portal on a
// loopback server.
type bundle struct {
	db      *pgtest.DB
	cluster *kafkatest.Cluster
	tcfg    topics.Config
	names   topics.Names
	h       *Handler
	srv     *httptest.Server
	logs    *syncBuffer
}

type setupOpts struct {
	cfg Config
	// schedule is the retry schedule; defaults to one 1s tier.
	schedule string
}

func setup(t testing.TB, o setupOpts) *bundle {
	t.Helper()
	if o.schedule == "" {
		o.schedule = "1s"
	}
	sched, err := retrytiers.ParseSchedule(o.schedule)
	require.NoError(t, err)
	tcfg := topics.Config{Partitions: 2, Schedule: sched}
	tcfg.SetDefaults()
	b := &bundle{db: pgtest.New(t), cluster: kafkatest.NewProvisioned(t, tcfg), tcfg: tcfg, names: topics.NamesFor(tcfg),
		logs: &syncBuffer{}}
	cfg := o.cfg
	cfg.AdminToken, cfg.Topics, cfg.AllowPrivateNetworks = testAdminToken, tcfg, true
	b.h, err = New(cfg, Deps{Logger: slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	mux := http.NewServeMux()
	b.h.Routes(mux)
	ctx, cancel := context.WithCancel(context.Background())
	b.h.Attach(ctx, Backend{Store: b.db.Store, Replay: replay.Deps{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(b.cluster.Addrs...)}, Names: b.names}})
	b.srv = httptest.NewServer(mux)
	t.Cleanup(func() {
		b.srv.Close()
		cancel()
		b.h.Wait()
		if t.Failed() {
			t.Logf("portal log:\n%s", b.logs.String())
		}
	})
	return b
}

// syncBuffer collects the portal's log for the redaction checks.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// endpoint creates an endpoint of account.
func (b *bundle) endpoint(t testing.TB, account, rawURL string, types ...string) endpoint.Endpoint {
	t.Helper()
	e, err := b.db.Store.CreateEndpoint(context.Background(), endpoint.Endpoint{ID: endpoint.NewID(), Account: account,
		URL: rawURL, Secrets: []string{endpoint.NewSecret()}, EventTypes: types})
	require.NoError(t, err)
	return e
}

// link creates a portal link and returns its token.
func (b *bundle) link(t testing.TB, account, endpointID, level string, ttl time.Duration) string {
	t.Helper()
	_, token, err := b.db.Store.CreatePortalLink(context.Background(), store.CreatePortalLinkParams{Account: account,
		EndpointID: endpointID, Level: level, CreatedBy: "test", TTL: ttl})
	require.NoError(t, err)
	return token
}

// deadLetter writes a dead-lettered delivery of event evt to e without
// running the pipeline: its dead letter on the DLQ and its attempt in the
// log, as the dispatcher and the attempt-log writer would.
func (b *bundle) deadLetter(t testing.TB, e endpoint.Endpoint, evt string) store.Delivery {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	body, err := delivery.Body(evt, "invoice.paid", now, []byte(`{"amount":42}`))
	require.NoError(t, err)
	d := delivery.Delivery{ID: delivery.ID(evt, e.ID), EventID: evt, EventType: "invoice.paid", EndpointID: e.ID,
		Account: e.Account, EventCreated: now, Body: body, Attempt: 2}
	cl := b.cluster.Client(t)
	rec := deadletter.Record(b.names.DLQ, d.Record(b.names.Deliveries), deadletter.Provenance{
		Reason: deadletter.ReasonRetriesExhausted, DeadAt: now, Attempts: 2, LastStatus: 503})
	res := cl.ProduceSync(ctx, rec)
	require.NoError(t, res.FirstErr())
	pos := res[0].Record
	recs := []*attempt.Record{{AttemptID: "att1_" + evt, DeliveryID: d.ID, EventID: evt, EventType: d.EventType, EndpointID: e.ID,
		Account: e.Account, EventCreated: now, Attempt: 1, Tier: b.names.Deliveries, StartedAt: now.Add(-2 * time.Second),
		Duration: 12 * time.Millisecond, StatusCode: 503, Outcome: attempt.OutcomeRetry, ErrorClass: "http_5xx",
		ResponseExcerpt: "upstream unavailable", NextAction: attempt.NextRetry, NextDueAt: now.Add(-time.Second)},
		{AttemptID: "att2_" + evt, DeliveryID: d.ID, EventID: evt, EventType: d.EventType, EndpointID: e.ID,
			Account: e.Account, EventCreated: now, Attempt: 2, Tier: b.names.Retry[0], StartedAt: now.Add(-time.Second),
			Duration: 15 * time.Millisecond, StatusCode: 503, Outcome: attempt.OutcomeRetry, ErrorClass: "http_5xx",
			ResponseExcerpt: "upstream unavailable", NextAction: attempt.NextDeadLetter,
			DLQ: &attempt.Position{Topic: pos.Topic, Partition: pos.Partition, Offset: pos.Offset}, DeadReason: deadletter.ReasonRetriesExhausted}}
	_, err = b.db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: recs, Now: now})
	require.NoError(t, err)
	out, err := b.db.Store.GetDelivery(ctx, e.Account, d.ID)
	require.NoError(t, err)
	require.Equal(t, "dead", out.Status)
	return out
}

// indexEndpoints adapts the endpoint index to the dispatcher, as hookd does.
type indexEndpoints struct{ x *endpoint.Index }

func (a indexEndpoints) Endpoint(id string) (dispatcher.Target, bool) {
	ep, ok := a.x.Endpoint(id)
	if !ok {
		return dispatcher.Target{}, false
	}
	return dispatcher.Target{ID: ep.ID, Account: ep.Account, URL: ep.URL, Secrets: ep.Secrets, Disabled: !ep.Active(),
		MaxInFlight: ep.MaxInFlight, Timeout: ep.Timeout, RatePerSec: ep.RatePerSec}, true
}

// startPipeline runs the endpoint index, a dispatcher and the attempt-log
// writer until the test ends: deliveries produced by the portal (test
// events, replays) really reach the receivers and the log.
func (b *bundle) startPipeline(t testing.TB) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	opts := []kgo.Opt{kgo.SeedBrokers(b.cluster.Addrs...)}
	x, err := endpoint.NewIndex(endpoint.IndexConfig{}, endpoint.IndexDeps{Source: b.db.Store, Logger: logger})
	require.NoError(t, err)
	d, err := dispatcher.New(dispatcher.Config{Topics: b.tcfg, AllowPrivateNetworks: true, CommitInterval: 100 * time.Millisecond,
		RetryJitter: -1, Timeout: 2 * time.Second, ConnectTimeout: time.Second}, dispatcher.Deps{Endpoints: indexEndpoints{x}, Logger: logger, Registerer: reg, KafkaOpts: opts})
	require.NoError(t, err)
	w, err := attemptlog.New(attemptlog.Config{Topic: b.names.Attempts, DeliveriesTopic: b.names.Deliveries, OpsTopic: b.names.Ops, EventsTopic: b.names.Events},
		attemptlog.Deps{Store: b.db.Store, Logger: logger, Registerer: reg, KafkaOpts: opts})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = x.Run(ctx) })
	wg.Go(func() {
		if x.WaitReady(ctx) == nil {
			_ = d.Run(ctx)
		}
	})
	wg.Go(func() { _ = w.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// receiver is a real HTTP receiver on loopback that verifies every
// signature and records the webhook-ids it received.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	fail bool
	wh   *standardwebhooks.Webhook
	got  []received
}

type received struct {
	ID       string
	Verified bool
	Status   int
}

func newReceiver(t testing.TB, secret string) *receiver {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	rc := &receiver{wh: wh, fail: true}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		status := http.StatusOK
		if rc.fail {
			status = http.StatusServiceUnavailable
		}
		rc.got = append(rc.got, received{ID: r.Header.Get("webhook-id"), Verified: rc.wh.Verify(body, r.Header) == nil, Status: status})
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "receiver says "+http.StatusText(status))
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) setFail(v bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.fail = v
}

// delivered reports whether id was received, verified and answered 200.
func (rc *receiver) delivered(id string) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, g := range rc.got {
		if g.ID == id && g.Verified && g.Status == http.StatusOK {
			return true
		}
	}
	return false
}

func (rc *receiver) count(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, g := range rc.got {
		if g.ID == id {
			n++
		}
	}
	return n
}

// client is a browser without JavaScript: cookies, redirects, forms.
type client struct {
	t    testing.TB
	c    *http.Client
	base string
	// header is added to every request (Origin, Sec-Fetch-Site).
	header http.Header
}

func (b *bundle) client(t testing.TB) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, c: &http.Client{Jar: jar, Timeout: 30 * time.Second}, base: b.srv.URL, header: http.Header{}}
}

// page is an answer.
type page struct {
	Status int
	Body   string
	URL    string
	Header http.Header
}

func (c *client) do(req *http.Request) page {
	c.t.Helper()
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	resp, err := c.c.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return page{Status: resp.StatusCode, Body: string(body), URL: resp.Request.URL.String(), Header: resp.Header}
}

func (c *client) get(path string) page {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

func (c *client) post(path string, form url.Values) page {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(form.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf is the CSRF token of the forms on the page at path.
func (c *client) csrf(path string) string {
	c.t.Helper()
	p := c.get(path)
	require.Equal(c.t, 200, p.Status, p.Body)
	m := csrfRe.FindStringSubmatch(p.Body)
	require.NotNil(c.t, m, "no csrf field on "+path)
	return m[1]
}

// submit posts form to action with the CSRF token of the page at from.
func (c *client) submit(from, action string, form url.Values) page {
	c.t.Helper()
	form.Set("csrf", c.csrf(from))
	return c.post(action, form)
}

// login opens a portal link as a person would: the link page, then its
// Continue button.
func (c *client) login(token string) page {
	c.t.Helper()
	p := c.get("/portal/login/" + token)
	if p.Status != 200 {
		return p
	}
	m := csrfRe.FindStringSubmatch(p.Body)
	require.NotNil(c.t, m)
	return c.post("/portal/login", url.Values{"csrf": {m[1]}, "token": {token}})
}
