package api

import (
	"context"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// testDNS answers the test hosts; any other name fails as NXDOMAIN, which
// CheckURL accepts (the dial-time guard decides).
var testDNS = dnsMap{
	"a.example.com":        {"93.184.216.34"},
	"b.example.com":        {"93.184.216.35"},
	"x.example.com":        {"93.184.216.36"},
	"internal.example.com": {"10.1.2.3"},
	"rebind.example.com":   {"93.184.216.37", "169.254.169.254"},
}

type dnsMap map[string][]string

func (m dnsMap) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

// state is what a refused request must leave unchanged.
type state struct {
	endpoints []endpoint.Endpoint
	replays   int
}

func (b *bundle) state(t testing.TB) state {
	t.Helper()
	ctx := context.Background()
	eps, err := b.db.Store.ListEndpoints(ctx, store.ListEndpointsParams{})
	require.NoError(t, err)
	rs, err := b.db.Store.ListReplays(ctx, store.ListReplaysParams{Limit: 1000})
	require.NoError(t, err)
	return state{endpoints: eps, replays: len(rs)}
}

// Issue 11 item 5: every bad input is a 400 naming the field (413 for an
// oversize body), never a 500, and nothing is written.
func TestBadInputIs400NamingTheField(t *testing.T) {
	t.Parallel()
	b := setup(t)
	url := `"url":"https://x.example.com/hook"`
	patch := "/v1/endpoints/" + b.epA
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		token, method, path, body, field string
	}{
		// Limits beyond int32, beyond this hookd's ceilings, negative.
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":3000000000}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":9223372036854775807}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":92233720368547758070}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":1e30}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":-1}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":10001}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"timeout_ms":1.5}`, "timeout_ms"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"max_in_flight":3000000000}`, "max_in_flight"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"max_in_flight":4294967297}`, "max_in_flight"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"max_in_flight":-1}`, "max_in_flight"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"max_in_flight":65}`, "max_in_flight"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"max_in_flight":"5"}`, "max_in_flight"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"rate_per_sec":-1}`, "rate_per_sec"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"rate_per_sec":1e300}`, "rate_per_sec"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"rate_per_sec":1e400}`, "rate_per_sec"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"rate_per_sec":"NaN"}`, "rate_per_sec"},
		// NUL bytes and control characters.
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"description":"a\u0000b"}`, "description"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"description":"\u001b[31mred"}`, "description"},
		{b.tokA, "POST", "/v1/endpoints", `{"url":"https://x.example.com/\u0000"}`, "url"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"event_types":["invoice.paid","a\u0000"]}`, "event_types[1]"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"secret":"whsec_\u0000"}`, "secret"},
		{adminToken, "POST", "/v1/endpoints", `{` + url + `,"account":"acct\u0000"}`, "account"},
		{adminToken, "POST", "/v1/endpoints", `{` + url + `,"account":"acct_a","id":"ep\u0000"}`, "id"},
		// Over-long strings and lists.
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"description":"` + long(1025) + `"}`, "description"},
		{b.tokA, "POST", "/v1/endpoints", `{"url":"https://x.example.com/` + long(2048) + `"}`, "url"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"event_types":["` + long(256) + `"]}`, "event_types"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"event_types":[` + strings.Repeat(`"a",`, 100) + `"a"]}`, "event_types"},
		{adminToken, "POST", "/v1/endpoints", `{` + url + `,"account":"` + long(256) + `"}`, "account"},
		{adminToken, "POST", "/v1/endpoints", `{` + url + `,"account":"acct_a","id":"` + long(256) + `"}`, "id"},
		// Unknown fields, wrong JSON types, trailing garbage, no body.
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"colour":"red"}`, "colour"},
		{b.tokA, "POST", "/v1/endpoints", `{"url":5}`, "url"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"event_types":"invoice.paid"}`, "event_types"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"event_types":[1]}`, "event_types"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"description":{}}`, "description"},
		{b.tokA, "POST", "/v1/endpoints", `[]`, "request body"},
		{b.tokA, "POST", "/v1/endpoints", `"x"`, "request body"},
		{b.tokA, "POST", "/v1/endpoints", `null`, "request body: must be a JSON object, got null"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `} x`, "trailing data"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `}}`, "trailing data"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `}{` + url + `}`, "trailing data"},
		{b.tokA, "POST", "/v1/endpoints", ``, "request body"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url, "request body"},
		{b.tokA, "POST", "/v1/endpoints", `{"url":"https://x.example.com",}`, "request body"},
		// Ids, accounts and patterns.
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"id":"ep_mine"}`, "id: only the admin token chooses endpoint ids"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"id":"` + b.epB + `"}`, "id: only the admin token chooses endpoint ids"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"account":"acct_b"}`, "account"},
		{b.tokA, "POST", "/v1/endpoints", `{` + url + `,"event_types":["invoice..paid"]}`, "event_types"},
		// The same on PATCH.
		{b.tokA, "PATCH", patch, `{"timeout_ms":3000000000}`, "timeout_ms"},
		{b.tokA, "PATCH", patch, `{"max_in_flight":100000}`, "max_in_flight"},
		{b.tokA, "PATCH", patch, `{"max_in_flight":4294967297}`, "max_in_flight"},
		{b.tokA, "PATCH", patch, `{"rate_per_sec":-0.5}`, "rate_per_sec"},
		{b.tokA, "PATCH", patch, `{"description":"\u0000"}`, "description"},
		{b.tokA, "PATCH", patch, `{"description":"` + long(1025) + `"}`, "description"},
		{b.tokA, "PATCH", patch, `{"event_types":["ok","in voice"]}`, "event_types"},
		{b.tokA, "PATCH", patch, `{"url":"https://x.example.com/\u0000"}`, "url"},
		{b.tokA, "PATCH", patch, `{"status":"paused"}`, "status"},
		{b.tokA, "PATCH", patch, `{"status":1}`, "status"},
		{b.tokA, "PATCH", patch, `{"id":"ep_other"}`, "id"},
		{b.tokA, "PATCH", patch, `{"description":"x"} trailing`, "trailing data"},
		// Replays and resends.
		{b.tokA, "POST", "/v1/replays", `{"reason":"a\u0000b"}`, "reason"},
		{b.tokA, "POST", "/v1/replays", `{"reason":"x","actor":"\u0000"}`, "actor"},
		{b.tokA, "POST", "/v1/replays", `{"reason":"x","filter":{"event_type":"\u0000"}}`, "filter.event_type"},
		{b.tokA, "POST", "/v1/replays", `{"reason":"x","filter":{"colour":"red"}}`, "colour"},
		{b.tokA, "POST", "/v1/replays", `{"reason":"x","limit":"ten"}`, "limit"},
		{b.tokA, "POST", "/v1/replays", `{"reason":"x","limit":1e100}`, "limit"},
		{b.tokA, "POST", "/v1/replays", `{"reason":"x"} {}`, "trailing data"},
		{b.tokA, "POST", "/v1/endpoints/" + b.epA + "/resend", `{"since":"1h","reason":"\u0000"}`, "reason"},
		// Query parameters.
		{b.tokA, "GET", "/v1/endpoints?status=%00", "", "status"},
		{b.tokA, "GET", "/v1/endpoints?status=%ff", "", "status"},
		{b.tokA, "GET", "/v1/dead-letters?event_type=%00", "", "event_type"},
		{b.tokA, "GET", "/v1/dead-letters?dlq_reason=%ff%fe", "", "dlq_reason"},
		{b.tokA, "GET", "/v1/endpoints/" + b.epA + "/deliveries?before=%00", "", "before"},
		{b.tokA, "GET", "/v1/endpoints?account=acct_b", "", "account"},
	}
	before := b.state(t)
	for _, c := range cases {
		var e apiError
		code := b.do(t, c.token, c.method, c.path, c.body, &e)
		require.Equal(t, 400, code, "%s %s %.200s: %s", c.method, c.path, c.body, e.Error.Message)
		require.Contains(t, e.Error.Message, c.field, "%s %s %.200s", c.method, c.path, c.body)
		require.NotContains(t, e.Error.Message, "\n")
	}
	require.Equal(t, before, b.state(t), "a refused request wrote something")

	var e apiError
	require.Equal(t, 413, b.do(t, b.tokA, "POST", "/v1/endpoints", `{`+url+`,"description":"`+long(5<<10)+`"}`, &e))
	require.Equal(t, 413, b.do(t, b.tokA, "POST", "/v1/endpoints", `{`+url+`}`+strings.Repeat(" ", 5<<10)+`x`, &e))
	require.Equal(t, 413, b.do(t, b.tokA, "PATCH", patch, `{"description":"`+long(5<<10)+`"}`, &e))
	require.Equal(t, before, b.state(t))
}

// A path id that no resource can have (NUL, invalid UTF-8, too long) is a
// 404 like any missing resource, never a 500 from Postgres.
func TestBadPathIDsAre404(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, id := range []string{"%00", "ep%00x", "%ff", "x%20y", strings.Repeat("x", 256)} {
		for _, c := range []struct{ method, path, body string }{
			{"GET", "/v1/endpoints/" + id, ""},
			{"PATCH", "/v1/endpoints/" + id, `{"description":"x"}`},
			{"DELETE", "/v1/endpoints/" + id, ""},
			{"GET", "/v1/endpoints/" + id + "/deliveries", ""},
			{"POST", "/v1/endpoints/" + id + "/resend", `{"since":"1h"}`},
			{"GET", "/v1/deliveries/" + id, ""},
			{"GET", "/v1/events/" + id + "/deliveries", ""},
			{"GET", "/v1/replays/" + id, ""},
		} {
			var e apiError
			require.Equal(t, 404, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %s", c.method, c.path)
			require.Equal(t, "not_found", e.Error.Code)
			require.Equal(t, 404, b.do(t, adminToken, c.method, c.path, c.body, &e), "%s %s", c.method, c.path)
		}
	}
}

// Issue 11 item 5: an account token cannot choose endpoint ids, so the
// answer never depends on whether an id exists in another account; the
// admin token may, and a taken id is a 409.
func TestEndpointIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var taken, fresh apiError
	require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"url":"https://x.example.com","id":"`+b.epB+`"}`, &taken))
	require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"url":"https://x.example.com","id":"ep_unused"}`, &fresh))
	require.Equal(t, fresh, taken, "the answer must not depend on another account's ids")
	require.Equal(t, "id: only the admin token chooses endpoint ids; omit it and hookd assigns one", taken.Error.Message)

	var ep endpointOut
	require.Equal(t, 201, b.do(t, adminToken, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com","account":"acct_a","id":"ep_chosen"}`, &ep))
	require.Equal(t, "ep_chosen", ep.ID)
	require.Equal(t, "acct_a", ep.Account)
	var e apiError
	require.Equal(t, 409, b.do(t, adminToken, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com","account":"acct_b","id":"ep_chosen"}`, &e))
	require.Equal(t, "conflict", e.Error.Code)
	require.Equal(t, 409, b.do(t, adminToken, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com","account":"acct_a","id":"`+b.epB+`"}`, &e))

	// Without an id, hookd assigns one.
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com"}`, &ep))
	require.True(t, strings.HasPrefix(ep.ID, "ep_"))
}

// The operator's ceilings bound what an endpoint may ask for.
func TestEndpointLimitsFollowConfig(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := b.server(t, V1Config{MaxEndpointInFlight: 8, MaxTimeout: 2 * time.Second})
	var ep endpointOut
	var e apiError
	require.Equal(t, 201, call(t, srv, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://x.example.com","max_in_flight":8,"timeout_ms":2000,"rate_per_sec":1000000}`, &ep), ep)
	require.Equal(t, 8, ep.MaxInFlight)
	require.EqualValues(t, 2000, ep.TimeoutMS)
	require.Equal(t, 400, call(t, srv, b.tokA, "POST", "/v1/endpoints", `{"url":"https://x.example.com","max_in_flight":9}`, &e))
	require.Equal(t, "max_in_flight: must be 0 (hookd's default) to 8 (this hookd's --max-endpoint-in-flight), got 9", e.Error.Message)
	require.Equal(t, 400, call(t, srv, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"timeout_ms":2001}`, &e))
	require.Equal(t, "timeout_ms: must be 0 (hookd's default) to 2000 (this hookd's request timeout, 2s), got 2001", e.Error.Message)
	var reset endpointOut
	require.Equal(t, 200, call(t, srv, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"timeout_ms":0,"max_in_flight":0}`, &reset))
	require.Zero(t, reset.TimeoutMS)
	require.Zero(t, reset.MaxInFlight)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	var c V1Config
	c.SetDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, 64, c.MaxEndpointInFlight)
	require.Equal(t, 10*time.Second, c.MaxTimeout)
	require.False(t, c.AllowPrivateNetworks)
	for field, mutate := range map[string]func(*V1Config){
		"max endpoint in-flight": func(c *V1Config) { c.MaxEndpointInFlight = -1 },
		"in-flight beyond int32": func(c *V1Config) { c.MaxEndpointInFlight = math.MaxInt32 + 1 },
		"max endpoint timeout":   func(c *V1Config) { c.MaxTimeout = time.Microsecond },
		"timeout beyond int32":   func(c *V1Config) { c.MaxTimeout = 30 * 24 * time.Hour },
		"max body bytes":         func(c *V1Config) { c.MaxBodyBytes = -1 },
		"max list limit":         func(c *V1Config) { c.MaxListLimit = -1 },
	} {
		c := V1Config{}
		mutate(&c)
		c.SetDefaults()
		require.Error(t, c.Validate(), field)
	}
}

// Issue 11 item 4: private destinations are refused at create and update
// with a 400 naming the URL and the reason, unless the API allows private
// networks.
func TestPrivateDestinationsRefusedAtCreateAndUpdate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const suffix = "; hookd refuses private destinations unless started with --allow-private-networks"
	before := b.state(t)
	for url, why := range map[string]string{
		"https://10.0.0.1/hook":         "10.0.0.1 is a private address (RFC 1918)",
		"http://127.0.0.1:8080/":        "127.0.0.1 is a loopback address (RFC 1122)",
		"http://[::1]/":                 "::1 is a loopback address (RFC 4291)",
		"http://169.254.169.254/latest": "169.254.169.254 is a cloud instance metadata address (metadata service)",
		"http://[::ffff:0:a9fe:a9fe]/":  "::ffff:0:a9fe:a9fe embeds 169.254.169.254, a cloud instance metadata address (metadata service)",
		"http://[64:ff9b::a00:1]/":      "64:ff9b::a00:1 embeds 10.0.0.1, a private address (RFC 1918)",
		"http://[2001:2::1]/":           "2001:2::1 is a benchmarking address (RFC 5180)",
		"http://localhost:9000/":        "localhost is a loopback name (RFC 6761)",
		"http://hooks.localhost/":       "hooks.localhost is a loopback name (RFC 6761)",
		// Issue 29: hosts net/http maps to these addresses before it dials.
		"http://127。0。0。1/":                 "127.0.0.1 is a loopback address (RFC 1122)",
		"http://①②⑦.⓪.⓪.①/":                 "127.0.0.1 is a loopback address (RFC 1122)",
		"http://１６９．２５４．１６９．２５４/":           "169.254.169.254 is a cloud instance metadata address (metadata service)",
		"http://ＬＯＣＡＬＨＯＳＴ/":                 "localhost is a loopback name (RFC 6761)",
		"https://internal.example.com/hook": "internal.example.com resolves to 10.1.2.3, which is a private address (RFC 1918)",
		"https://rebind.example.com/hook":   "rebind.example.com resolves to 169.254.169.254, which is a cloud instance metadata address (metadata service)",
	} {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"url":"`+url+`"}`, &e), url)
		require.Equal(t, "url: "+why+suffix, e.Error.Message, url)
		require.Equal(t, 400, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+b.epA, `{"url":"`+url+`"}`, &e), url)
		require.Equal(t, "url: "+why+suffix, e.Error.Message, url)
		require.Equal(t, 400, b.do(t, adminToken, "POST", "/v1/endpoints", `{"account":"acct_a","url":"`+url+`"}`, &e), "the admin too: %s", url)
	}
	require.Equal(t, before, b.state(t))

	// Numeric hosts that are not IP addresses are refused whatever the
	// setting: resolvers read them differently.
	var e apiError
	require.Equal(t, 400, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"url":"http://2130706433/"}`, &e))
	require.Contains(t, e.Error.Message, "numeric")

	// A name that does not resolve is accepted: the dial-time guard decides
	// when it does.
	var ep endpointOut
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"https://not-yet-published.example.com/hook"}`, &ep))

	// With --allow-private-networks, private destinations are accepted; an
	// endpoint whose URL is private can then be changed in other ways
	// without the check (it only runs when the URL changes).
	open := b.server(t, V1Config{AllowPrivateNetworks: true})
	require.Equal(t, 201, call(t, open, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"http://127.0.0.1:8080/"}`, &ep))
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"description":"local receiver"}`, &ep))
	require.Equal(t, "http://127.0.0.1:8080/", ep.URL)
	require.Equal(t, 400, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"url":"http://10.0.0.2/"}`, &e))
	require.Equal(t, 200, call(t, open, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"url":"http://10.0.0.2/"}`, &ep))

	// The normalised URL is what is stored, at create and at update.
	require.Equal(t, 201, call(t, open, b.tokA, "POST", "/v1/endpoints", `{"event_types":["*"],"url":"http://①②⑦.⓪.⓪.①:8080/x"}`, &ep))
	require.Equal(t, "http://127.0.0.1:8080/x", ep.URL)
	require.Equal(t, 200, call(t, open, b.tokA, "PATCH", "/v1/endpoints/"+ep.ID, `{"url":"https://bücher.example/hook"}`, &ep))
	require.Equal(t, "https://xn--bcher-kva.example/hook", ep.URL)
	stored, err := b.db.Store.GetEndpoint(context.Background(), ep.ID)
	require.NoError(t, err)
	require.Equal(t, "https://xn--bcher-kva.example/hook", stored.URL)
}

// server starts a second API with cfg (plus the admin token) on the
// bundle's store and Kafka; it returns its base URL.
func (b *bundle) server(t *testing.T, cfg V1Config) string {
	t.Helper()
	cfg.AdminToken = adminToken
	api := NewV1(cfg, nil)
	api.resolver = testDNS
	mux := http.NewServeMux()
	api.Routes(mux)
	ctx, cancel := context.WithCancel(context.Background())
	api.Attach(ctx, Backend{Store: b.db.Store, Replay: replay.Deps{KafkaOpts: []kgo.Opt{kgo.SeedBrokers(b.cluster.Addrs...)}, Names: b.names}})
	srv := httptest.NewServer(validating(t, mux))
	t.Cleanup(func() {
		srv.Close()
		cancel()
		api.Wait()
	})
	return srv.URL
}
