package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
)

const adminToken = "admin-secret-for-tests"

type bundle struct {
	srv           *httptest.Server
	db            *pgtest.DB
	cluster       *kafkatest.Cluster
	names         topics.Names
	tokA, tokB    string
	epA, epB      string
	dlvA, dlvB    string
	api           *V1
	cancelReplays context.CancelFunc
	// reporter fails the test on a request or answer openapi.yaml does
	// not describe.
	reporter *reporter
}

func setup(t testing.TB) *bundle {
	t.Helper()
	ctx := context.Background()
	cfg := topics.Config{Partitions: 2}
	cfg.SetDefaults()
	b := &bundle{db: pgtest.New(t), cluster: kafkatest.NewProvisioned(t, cfg), names: topics.NamesFor(cfg)}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.api = NewV1(V1Config{AdminToken: adminToken, MaxBodyBytes: 4 << 10}, logger)
	b.api.resolver = testDNS
	mux := http.NewServeMux()
	b.api.Routes(mux)
	runCtx, cancel := context.WithCancel(ctx)
	b.cancelReplays = cancel
	b.api.Attach(runCtx, Backend{Store: b.db.Store, Replay: replay.Deps{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(b.cluster.Addrs...)}, Names: b.names}})
	b.reporter = &reporter{tb: t}
	b.srv = httptest.NewServer(validating(b.reporter, mux))
	t.Cleanup(func() {
		b.srv.Close()
		cancel()
		b.api.Wait()
	})
	var err error
	_, b.tokA, err = b.db.Store.CreateAPIToken(ctx, "acct_a", "test")
	require.NoError(t, err)
	_, b.tokB, err = b.db.Store.CreateAPIToken(ctx, "acct_b", "test")
	require.NoError(t, err)

	var ep map[string]any
	code := b.do(t, b.tokA, "POST", "/v1/endpoints", `{"url":"https://a.example.com/hook","event_types":["invoice.*"]}`, &ep)
	require.Equal(t, 201, code, ep)
	b.epA = ep["id"].(string)
	require.True(t, strings.HasPrefix(ep["secret"].(string), "whsec_"))
	code = b.do(t, b.tokB, "POST", "/v1/endpoints", `{"url":"https://b.example.com/hook","event_types":["*"]}`, &ep)
	require.Equal(t, 201, code, ep)
	b.epB = ep["id"].(string)
	require.Equal(t, "acct_b", ep["account"])

	b.dlvA = b.delivery(t, "evt_a", b.epA, "acct_a")
	b.dlvB = b.delivery(t, "evt_b", b.epB, "acct_b")
	return b
}

// delivery writes a delivery with one failed attempt and a dead letter.
func (b *bundle) delivery(t testing.TB, evt, ep, account string) string {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	id := delivery.ID(evt, ep)
	rec := attempt.Record{AttemptID: "att_" + evt, DeliveryID: id, EventID: evt, EventType: "invoice.paid", EndpointID: ep,
		Account: account, EventCreated: now, Attempt: 1, Tier: b.names.Deliveries, StartedAt: now, Duration: time.Millisecond,
		StatusCode: 503, Outcome: attempt.OutcomeRetry, ErrorClass: "http_5xx", NextAction: attempt.NextDeadLetter,
		DLQ: &attempt.Position{Topic: b.names.DLQ}, DeadReason: deadletter.ReasonRetriesExhausted}
	_, err := b.db.Store.WriteAttempts(ctx, store.WriteAttemptsParams{Records: []*attempt.Record{&rec}, Now: now})
	require.NoError(t, err)
	body, err := delivery.Body(evt, "invoice.paid", now, []byte(`{}`))
	require.NoError(t, err)
	d := delivery.Delivery{ID: id, EventID: evt, EventType: "invoice.paid", EndpointID: ep, Account: account, EventCreated: now, Body: body}
	src := d.Record(b.names.Deliveries)
	src.Partition = int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(ep)}, 2))
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(ctx, deadletter.Record(b.names.DLQ, src, deadletter.Provenance{Reason: deadletter.ReasonRetriesExhausted, DeadAt: now})).FirstErr())
	return id
}

func (b *bundle) do(t testing.TB, token, method, path, body string, out any) int {
	t.Helper()
	return call(t, b.srv.URL, token, method, path, body, out)
}

// call sends one request to the API at base and decodes the answer into out.
func call(t testing.TB, base, token, method, path, body string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if out != nil && len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var e apiError
	require.Equal(t, 401, b.do(t, "", "GET", "/v1/endpoints", "", &e))
	require.Equal(t, "unauthorized", e.Error.Code)
	require.Equal(t, 401, b.do(t, "hkt_wrong", "GET", "/v1/endpoints", "", nil))
	require.Equal(t, 401, b.do(t, "not-even-a-token", "GET", "/v1/replays", "", nil))
	require.Equal(t, 200, b.do(t, "", "GET", "/v1/openapi.yaml", "", nil), "the document is public")

	toks, err := b.db.Store.ListAPITokens(context.Background(), "acct_a")
	require.NoError(t, err)
	require.NoError(t, b.db.Store.RevokeAPIToken(context.Background(), toks[0].ID))
	require.Equal(t, 401, b.do(t, b.tokA, "GET", "/v1/endpoints", "", nil), "revoked")

	// Admin access is off without an admin token.
	noAdmin := NewV1(V1Config{}, nil)
	mux := http.NewServeMux()
	noAdmin.Routes(mux)
	noAdmin.Attach(context.Background(), Backend{Store: b.db.Store})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/endpoints", nil)
	req.Header.Set("Authorization", "Bearer ")
	mux.ServeHTTP(rec, req)
	require.Equal(t, 401, rec.Code)
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("GET", "/v1/endpoints", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	mux.ServeHTTP(rec, req)
	require.Equal(t, 401, rec.Code)
	rec = httptest.NewRecorder()
	req = httptest.NewRequest("GET", "/v1/endpoints", nil)
	req.Header.Set("Authorization", "Bearer "+b.tokB)
	mux.ServeHTTP(rec, req)
	require.Equal(t, 200, rec.Code, "account tokens work without an admin token")
}

func TestAccountIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A cannot read, modify, replay or resend anything of B's: 404, as if
	// it did not exist.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/endpoints/" + b.epB, ""},
		{"PATCH", "/v1/endpoints/" + b.epB, `{"url":"https://evil.example.com"}`},
		{"DELETE", "/v1/endpoints/" + b.epB, ""},
		{"GET", "/v1/endpoints/" + b.epB + "/deliveries", ""},
		{"POST", "/v1/endpoints/" + b.epB + "/resend", `{"since":"1h","force":true}`},
		{"GET", "/v1/deliveries/" + b.dlvB, ""},
		{"GET", "/v1/events/evt_b/deliveries", ""},
		{"GET", "/v1/dead-letters?endpoint=" + b.epB, ""},
		{"POST", "/v1/replays", `{"reason":"steal","filter":{"endpoint":"` + b.epB + `"},"force":true}`},
	} {
		var e apiError
		require.Equal(t, 404, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %s", c.method, c.path)
		require.NotEmpty(t, e.Error.Message)
	}
	var e apiError
	require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/replays", `{"reason":"steal","filter":{"account":"acct_b"}}`, &e))
	require.Contains(t, e.Error.Message, "acct_a")
	require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"account":"acct_b","url":"https://x.example.com"}`, &e))

	var got map[string]any
	require.Equal(t, 200, b.do(t, b.tokB, "GET", "/v1/endpoints/"+b.epB, "", &got), "B's endpoint is untouched")
	require.Equal(t, "https://b.example.com/hook", got["url"])

	var list struct{ Data []map[string]any }
	require.Equal(t, 400, b.do(t, b.tokA, "GET", "/v1/endpoints?account=acct_b", "", &e), "docs/api.md: filters naming another account answer 400")
	require.Equal(t, "account: this token sees only account acct_a", e.Error.Message)
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints?account=acct_a", "", &list))
	require.Len(t, list.Data, 1)
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints", "", &list))
	require.Len(t, list.Data, 1)
	require.Equal(t, b.epA, list.Data[0]["id"])
	var dls struct{ Data []replay.Entry }
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/dead-letters", "", &dls))
	require.Len(t, dls.Data, 1)
	require.Equal(t, "evt_a", dls.Data[0].EventID)

	// Own resources work.
	var tl deliveryOut
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/deliveries/"+b.dlvA, "", &tl))
	require.Equal(t, "dead", tl.Status)
	require.Len(t, tl.Timeline, 1)
	require.Equal(t, 503, tl.Timeline[0].StatusCode)
	var ds struct{ Data []store.Delivery }
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/endpoints/"+b.epA+"/deliveries?status=dead", "", &ds))
	require.Len(t, ds.Data, 1)

	// Admin sees everything.
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/endpoints", "", &list))
	require.Len(t, list.Data, 2)
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/deliveries/"+b.dlvB, "", &tl))
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/dead-letters", "", &dls))
	require.Len(t, dls.Data, 2)
	var ev struct{ Data []deliveryOut }
	require.Equal(t, 200, b.do(t, adminToken, "GET", "/v1/events/evt_b/deliveries", "", &ev))
	require.Len(t, ev.Data, 1)
	require.Equal(t, 201, b.do(t, adminToken, "POST", "/v1/endpoints", `{"account":"acct_c","event_types":["*"],"url":"https://c.example.com"}`, &got))
	require.Equal(t, 204, b.do(t, b.tokA, "DELETE", "/v1/endpoints/"+b.epA, "", nil))
	require.Equal(t, 404, b.do(t, b.tokA, "GET", "/v1/endpoints/"+b.epA, "", nil))
}

func TestReplayOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var dry replay.Result
	require.Equal(t, 200, b.do(t, b.tokA, "POST", "/v1/replays", `{"reason":"INC-1","dry_run":true}`, &dry))
	require.True(t, dry.DryRun)
	require.EqualValues(t, 1, dry.Replayed, "%+v", dry)
	require.EqualValues(t, 1, dry.Matched, "only A's dead letter")

	// A's endpoint is active: the replay runs in the background.
	var started map[string]any
	require.Equal(t, 202, b.do(t, b.tokA, "POST", "/v1/replays", `{"reason":"INC-1","actor":"support-bot"}`, &started))
	id := started["id"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var row store.Replay
	for row.Status != store.ReplayDone {
		require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/replays/"+id, "", &row))
		select {
		case <-ctx.Done():
			t.Fatalf("replay not done: %+v", row)
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
	require.EqualValues(t, 1, row.Replayed, "%+v %s %s", row, row.Progress, row.Filter)
	require.Equal(t, "api:acct_a/support-bot", row.Actor)
	require.Equal(t, "acct_a", row.Account)
	require.Equal(t, 404, b.do(t, b.tokB, "GET", "/v1/replays/"+id, "", nil), "B cannot see A's replay")
	var rs struct{ Data []store.Replay }
	require.Equal(t, 200, b.do(t, b.tokB, "GET", "/v1/replays", "", &rs))
	require.Empty(t, rs.Data)

	// The same request again: already done.
	var again replay.Result
	require.Equal(t, 200, b.do(t, b.tokA, "POST", "/v1/replays", `{"reason":"INC-1","actor":"support-bot"}`, &again))
	require.True(t, again.AlreadyDone)

	// A disabled endpoint is refused unless force.
	require.Equal(t, 200, b.do(t, b.tokB, "PATCH", "/v1/endpoints/"+b.epB, `{"status":"disabled"}`, nil))
	var e apiError
	require.Equal(t, 409, b.do(t, b.tokB, "POST", "/v1/endpoints/"+b.epB+"/resend", `{"since":"1h"}`, &e))
	require.Equal(t, "endpoint_disabled", e.Error.Code)
	require.Equal(t, 202, b.do(t, b.tokB, "POST", "/v1/endpoints/"+b.epB+"/resend", `{"since":"1h","force":true}`, nil))
}

func TestValidation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/v1/endpoints", `{"url":"ftp://x.example.com"}`, "scheme must be http or https"},
		{"POST", "/v1/endpoints", `{"url":"https://x.example.com","event_types":["invoice..paid"]}`, "empty segment"},
		{"POST", "/v1/endpoints", `{"url":"https://x.example.com","event_types":["invoice.paid!"]}`, "only letters"},
		{"POST", "/v1/endpoints", `{"url":"https://x.example.com","colour":"red"}`, "unknown field"},
		{"POST", "/v1/endpoints", `{"url":`, "request body"},
		{"POST", "/v1/endpoints", `{"url":"https://x.example.com","secret":"hunter2"}`, "whsec_"},
		{"POST", "/v1/endpoints", `{"url":"https://x.example.com"}`, `event_types: required: the event types to receive, or ["*"] for all`},
		{"POST", "/v1/endpoints", `{"url":"https://x.example.com","event_types":[]}`, "event_types: required"},
		{"PATCH", "/v1/endpoints/" + b.epA, `{"status":"paused"}`, "status"},
		{"PATCH", "/v1/endpoints/" + b.epA, `{"url":"javascript:alert(1)"}`, "scheme"},
		{"GET", "/v1/endpoints?limit=0", "", "limit"},
		{"GET", "/v1/endpoints/" + b.epA + "/deliveries?status=lost", "", "status"},
		{"GET", "/v1/endpoints/" + b.epA + "/deliveries?before=yesterday", "", "before"},
		{"GET", "/v1/dead-letters?since=soon", "", "since"},
		{"POST", "/v1/replays", `{"filter":{}}`, "reason is required"},
		{"POST", "/v1/replays", `{"reason":"x","rate":-1}`, "rate"},
		{"POST", "/v1/endpoints/" + b.epA + "/resend", `{}`, "since: required"},
	} {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %s %s", c.method, c.path, c.body)
		require.Contains(t, e.Error.Message, c.want, "%s %s %s", c.method, c.path, c.body)
	}
	var e apiError
	big := `{"url":"https://x.example.com","description":"` + strings.Repeat("x", 5<<10) + `"}`
	require.Equal(t, 413, b.do(t, b.tokA, "POST", "/v1/endpoints", big, &e))
	require.Contains(t, e.Error.Message, "larger than")
	require.Equal(t, 404, b.do(t, b.tokA, "GET", "/v1/nope", "", &e))
	require.Equal(t, "not_found", e.Error.Code)
}

// The OpenAPI document describes exactly the registered routes, each with
// its responses, and every authenticated operation documents 401.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc struct {
		OpenAPI string                          `yaml:"openapi"`
		Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	}
	type operation struct {
		OperationID string                 `yaml:"operationId"`
		Security    *[]map[string][]string `yaml:"security"`
		Responses   map[string]any         `yaml:"responses"`
	}
	require.NoError(t, yaml.Unmarshal(OpenAPI(), &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))
	var documented, registered []string
	ops := map[string]bool{}
	for path, item := range doc.Paths {
		for method, node := range item {
			if method == "parameters" {
				continue
			}
			var op operation
			require.NoError(t, node.Decode(&op), path+" "+method)
			key := strings.ToUpper(method) + " " + path
			documented = append(documented, key)
			require.NotEmpty(t, op.OperationID, key)
			require.False(t, ops[op.OperationID], "duplicate operationId %s", op.OperationID)
			ops[op.OperationID] = true
			require.NotEmpty(t, op.Responses, key)
			public := op.Security != nil && len(*op.Security) == 0
			if !public {
				require.Contains(t, op.Responses, "401", key)
			}
		}
	}
	for _, r := range routes {
		registered = append(registered, r.method+" "+r.path)
	}
	sort.Strings(documented)
	sort.Strings(registered)
	require.Equal(t, registered, documented)

	// And the mux really serves each route (not the /v1/ fallback).
	b := &bundle{}
	mux := http.NewServeMux()
	b.api = NewV1(V1Config{}, nil)
	b.api.Routes(mux)
	for _, key := range registered {
		method, path, _ := strings.Cut(key, " ")
		req := httptest.NewRequest(method, strings.ReplaceAll(path, "{id}", "x"), bytes.NewReader(nil))
		_, pattern := mux.Handler(req)
		require.Equal(t, key, pattern, key)
	}
	require.True(t, slices.Contains(registered, "GET /v1/openapi.yaml"))
}

// Issue 29: no answer of the API may be kept by a browser, proxy or CDN:
// some carry a secret shown once (an endpoint's signing secret, a portal
// link's token), and every one is a single caller's.
func TestAnswersAreNotStored(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range []struct{ token, method, path, body string }{
		{b.tokA, "POST", "/v1/endpoints", `{"url":"https://a2.example.com/hook","event_types":["*"]}`},
		{adminToken, "POST", "/v1/endpoints", `{"account":"acct_a","url":"https://a3.example.com/hook","event_types":["*"]}`},
		{b.tokA, "POST", "/v1/portal-links", `{}`},
		{adminToken, "POST", "/v1/portal-links", `{"account":"acct_b","level":"manage"}`},
		{b.tokA, "GET", "/v1/endpoints/" + b.epA, ""},
		{b.tokA, "GET", "/v1/endpoints", ""},
		{b.tokA, "GET", "/v1/replays", ""},
		{"wrong", "GET", "/v1/endpoints", ""},
	} {
		var rd io.Reader
		if c.body != "" {
			rd = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, b.srv.URL+c.path, rd)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Less(t, resp.StatusCode, 500, "%s %s: %s", c.method, c.path, raw)
		require.Equal(t, "no-store", resp.Header.Get("Cache-Control"), "%s %s answered %d", c.method, c.path, resp.StatusCode)
	}
}
