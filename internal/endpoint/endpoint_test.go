package endpoint_test

import (
	"errors"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
)

func TestMatchType(t *testing.T) {
	t.Parallel()
	cases := []struct {
		pattern, typ string
		want         bool
	}{
		{"*", "invoice.paid", true},
		{"invoice.paid", "invoice.paid", true},
		{"invoice.paid", "invoice.paid.x", false},
		{"invoice.paid", "invoice.pai", false},
		{"invoice.*", "invoice.paid", true},
		{"invoice.*", "invoice.payment.failed", true},
		{"invoice.*", "invoice", false},
		{"invoice.*", "invoices.paid", false},
		{"*.created", "customer.created", true},
		{"*.created", "customer.updated", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"**", "", true},
		{"a**", "abc", true},
		{"", "", true},
		{"", "a", false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, endpoint.MatchType(c.pattern, c.typ), "%q vs %q", c.pattern, c.typ)
	}
	// Adversarial patterns stay fast (no exponential backtracking).
	start := time.Now()
	require.False(t, endpoint.MatchType(strings.Repeat("a*", 100)+"b", strings.Repeat("a", 255)))
	require.Less(t, time.Since(start), time.Second)
}

func TestSubscribes(t *testing.T) {
	t.Parallel()
	all := endpoint.Endpoint{}
	require.True(t, all.Subscribes("anything.at.all"))
	some := endpoint.Endpoint{EventTypes: []string{"invoice.*", "customer.created"}}
	require.True(t, some.Subscribes("invoice.paid"))
	require.True(t, some.Subscribes("customer.created"))
	require.False(t, some.Subscribes("customer.deleted"))
}

func TestNewSecretAndID(t *testing.T) {
	t.Parallel()
	s := endpoint.NewSecret()
	require.True(t, strings.HasPrefix(s, "whsec_"))
	key, err := endpoint.SecretKey(s)
	require.NoError(t, err)
	require.Len(t, key, 32)
	require.NotEqual(t, s, endpoint.NewSecret())

	id := endpoint.NewID()
	require.True(t, strings.HasPrefix(id, "ep_"))
	require.Len(t, id, 3+26)
	require.NoError(t, endpoint.ValidateID(id))
	require.NotEqual(t, id, endpoint.NewID())

	for _, bad := range []string{"", "sk_abc", "whsec_!!!", "whsec_" + "c2hvcnQ="} {
		_, err := endpoint.SecretKey(bad)
		require.ErrorIs(t, err, endpoint.ErrInvalid, bad)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := endpoint.Endpoint{ID: "ep_1", Account: "acct_1", URL: "https://example.com/hook", Secrets: []string{endpoint.NewSecret()},
		EventTypes: []string{"invoice.*"}, Status: endpoint.StatusActive, Description: "tab\tand\nnewline, ünïcode",
		MaxInFlight: endpoint.MaxInFlightBound, Timeout: endpoint.TimeoutBound, RatePerSec: endpoint.RatePerSecBound}
	require.NoError(t, ok.Validate())
	cases := []struct {
		name, field string
		mutate      func(e *endpoint.Endpoint)
	}{
		{"no account", "account", func(e *endpoint.Endpoint) { e.Account = "" }},
		{"ftp url", "url", func(e *endpoint.Endpoint) { e.URL = "ftp://example.com" }},
		{"relative url", "url", func(e *endpoint.Endpoint) { e.URL = "/hook" }},
		{"creds in url", "url", func(e *endpoint.Endpoint) { e.URL = "https://u:p@example.com" }},
		{"no secret", "secrets", func(e *endpoint.Endpoint) { e.Secrets = nil }},
		{"bad secret", "secret", func(e *endpoint.Endpoint) { e.Secrets = []string{"hunter2"} }},
		{"spaced type", "event_types", func(e *endpoint.Endpoint) { e.EventTypes = []string{"invoice paid"} }},
		{"empty segment", "event_types", func(e *endpoint.Endpoint) { e.EventTypes = []string{"invoice..paid"} }},
		{"too many types", "event_types", func(e *endpoint.Endpoint) { e.EventTypes = make([]string, endpoint.MaxEventTypes+1) }},
		{"bad status", "status", func(e *endpoint.Endpoint) { e.Status = "paused" }},
		{"negative rate", "rate_per_sec", func(e *endpoint.Endpoint) { e.RatePerSec = -1 }},
		{"NaN rate", "rate_per_sec", func(e *endpoint.Endpoint) { e.RatePerSec = math.NaN() }},
		{"infinite rate", "rate_per_sec", func(e *endpoint.Endpoint) { e.RatePerSec = math.Inf(1) }},
		{"huge rate", "rate_per_sec", func(e *endpoint.Endpoint) { e.RatePerSec = 1e300 }},
		{"negative in flight", "max_in_flight", func(e *endpoint.Endpoint) { e.MaxInFlight = -1 }},
		{"in flight beyond int32", "max_in_flight", func(e *endpoint.Endpoint) { e.MaxInFlight = math.MaxInt32 + 1 }},
		{"negative timeout", "timeout", func(e *endpoint.Endpoint) { e.Timeout = -time.Second }},
		{"sub-ms timeout", "timeout", func(e *endpoint.Endpoint) { e.Timeout = time.Microsecond }},
		{"timeout beyond int32 ms", "timeout", func(e *endpoint.Endpoint) { e.Timeout = endpoint.TimeoutBound + time.Millisecond }},
		{"NUL in description", "description", func(e *endpoint.Endpoint) { e.Description = "a\x00b" }},
		{"ESC in description", "description", func(e *endpoint.Endpoint) { e.Description = "\x1b[31mred" }},
		{"bad UTF-8 in description", "description", func(e *endpoint.Endpoint) { e.Description = "\xff" }},
		{"long description", "description", func(e *endpoint.Endpoint) { e.Description = strings.Repeat("x", endpoint.MaxDescriptionLen+1) }},
		{"NUL in disabled reason", "disabled_reason", func(e *endpoint.Endpoint) { e.DisabledReason = "x\x00" }},
		{"NUL in id", "id", func(e *endpoint.Endpoint) { e.ID = "ep\x00" }},
		{"long id", "id", func(e *endpoint.Endpoint) { e.ID = strings.Repeat("x", 256) }},
	}
	for _, c := range cases {
		e := ok
		e.Secrets = append([]string(nil), ok.Secrets...)
		c.mutate(&e)
		err := e.Validate()
		require.ErrorIs(t, err, endpoint.ErrInvalid, c.name)
		require.Contains(t, err.Error(), c.field, c.name)
		require.NotContains(t, err.Error(), "\n", c.name)
		require.Less(t, len(err.Error()), 400, c.name)
	}
}

func TestValidateURL(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"https://example.com/hook", "http://127.0.0.1:8080/x", "https://[::1]:443/", "https://bücher.example/",
		"https://[fe80::1%25eth0]/", "https://cafe.example/", "https://example.com./", "https://1.2.3.4/", "https://x.example/?q=\u00e9#f",
		"https://" + strings.Repeat("a", endpoint.MaxURLLen-len("https://"))} {
		require.NoError(t, endpoint.ValidateURL(good), good)
	}
	for _, bad := range []string{"", "https://" + strings.Repeat("a", endpoint.MaxURLLen), "ftp://x", "/hook", "https://", "https://u@x/",
		"https://x/\x00", "https://x/\xff", "http://127.1/", "http://2130706433/", "http://0x7f000001/", "http://0x7f.0.0.1/",
		"http://0177.0.0.1/", "http://example.123/", "http://[::1/", "javascript:alert(1)"} {
		err := endpoint.ValidateURL(bad)
		require.ErrorIs(t, err, endpoint.ErrInvalid, bad)
		require.Contains(t, err.Error(), "url", bad)
	}
}

// Issue 29: a host written with full-width or ideographic dots, or with
// full-width or circled digits, is the ASCII host net/http dials; the
// normalised URL is what the SSRF check judges and the store keeps.
func TestNormalizeURL(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"http://127。0。0。1/":            "http://127.0.0.1/",
		"http://①②⑦.⓪.⓪.①/":            "http://127.0.0.1/",
		"http://１２７．０．０．１:8080/x?q=1":  "http://127.0.0.1:8080/x?q=1",
		"http://127｡0｡0｡1/hook#f":      "http://127.0.0.1/hook#f",
		"https://bücher.example/a%2Fb": "https://xn--bcher-kva.example/a%2Fb",
		"https://Example.COM/Hook":     "https://Example.COM/Hook",
		"https://a_b.example/":         "https://a_b.example/",
		"https://[::1]:443/":           "https://[::1]:443/",
	} {
		got, err := endpoint.NormalizeURL(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
	}
	for _, bad := range []string{"http://①②⑦.①/", "http://０ｘ7f.0.0.1/", "http://example.①②③/", "http://a\u200db.example/", "http://169.254.169.254。/"} {
		_, err := endpoint.NormalizeURL(bad)
		require.ErrorIs(t, err, endpoint.ErrInvalid, bad)
	}
}

// One rule for the API, hookctl and the store.
func TestValidatePattern(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"*", "**", "invoice.*", "*.created", "invoice.paid", "a.b-c_d", "Invoice.Paid2"} {
		require.NoError(t, endpoint.ValidatePattern(good), good)
	}
	for bad, want := range map[string]string{
		"":                       "1..255",
		strings.Repeat("a", 256): "1..255",
		"invoice..paid":          "empty segment",
		"invoice.":               "empty segment",
		".invoice":               "empty segment",
		"in voice":               "only letters",
		"invoice:paid":           "only letters",
		"invoice.paid!":          "only letters",
		"invoice\x00":            "only letters",
		"ünïcode":                "only letters",
	} {
		err := endpoint.ValidatePattern(bad)
		require.ErrorIs(t, err, endpoint.ErrInvalid, bad)
		require.Contains(t, err.Error(), want, bad)
	}
}

// ValidatePattern guards what endpoints subscribe to: never a panic, and an
// accepted pattern has no empty segment and matches itself when it has no
// wildcard.
func FuzzValidatePattern(f *testing.F) {
	for _, s := range []string{"invoice.*", "*", "invoice..paid", "a.b-c_d", "in voice", ".x", "x.", "**", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if err := endpoint.ValidatePattern(p); err != nil {
			if !errors.Is(err, endpoint.ErrInvalid) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("bad error %q", err)
			}
			return
		}
		if strings.Contains(p, "..") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || len(p) > endpoint.MaxTypeLen {
			t.Fatalf("%q accepted", p)
		}
		for i := 0; i < len(p); i++ {
			if p[i] <= ' ' || p[i] > '~' {
				t.Fatalf("%q accepted with byte %#x", p, p[i])
			}
		}
		if !strings.Contains(p, "*") && !endpoint.MatchType(p, p) {
			t.Fatalf("%q does not match itself", p)
		}
	})
}

// ValidateURL never panics; an accepted URL is http(s) with a host, valid
// UTF-8 without control characters, and its host is an IP address or has
// a non-numeric last label.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{"https://example.com/hook", "http://127.1/", "http://[::1]:80/", "https://u:p@x/", "http://0x7f.1/",
		"https://[fe80::1%25eth0]/", "http://x/\x00", "https://bücher.example/", "http://1.2.3.4.5/", "http://[::ffff:0:a9fe:a9fe]/",
		"http://127。0。0。1/", "http://①②⑦.⓪.⓪.①/", "http://１２７．０．０．１/", "http://127｡0｡0｡1:8080/", "http://①②⑦.①/",
		"http://127%E3%80%820%E3%80%820%E3%80%821/", "http://ｅｘａｍｐｌｅ.com/", "http://xn--bcher-kva.example/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if err := endpoint.ValidateURL(raw); err != nil {
			if !errors.Is(err, endpoint.ErrInvalid) || strings.Contains(err.Error(), "\n") || len(err.Error()) > 500 {
				t.Fatalf("bad error %q", err)
			}
			return
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%q accepted but does not parse: %v", raw, err)
		}
		if (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil || !utf8.ValidString(raw) || len(raw) > endpoint.MaxURLLen {
			t.Fatalf("%q accepted", raw)
		}
		if strings.ContainsAny(raw, "\x00\r\n") {
			t.Fatalf("%q accepted with a control character", raw)
		}
		norm, err := endpoint.NormalizeURL(raw)
		if err != nil {
			t.Fatalf("%q accepted but does not normalise: %v", raw, err)
		}
		if again, err := endpoint.NormalizeURL(norm); err != nil || again != norm {
			t.Fatalf("%q normalises to %q, which normalises to %q (%v)", raw, norm, again, err)
		}
		nu, err := url.Parse(norm)
		if err != nil {
			t.Fatalf("%q normalises to %q, which does not parse: %v", raw, norm, err)
		}
		host := nu.Hostname()
		for i := 0; i < len(host); i++ {
			if host[i] >= utf8.RuneSelf {
				t.Fatalf("%q normalises to the non-ASCII host %q", raw, host)
			}
		}
		if _, err := netip.ParseAddr(host); err != nil {
			last := host[strings.LastIndexByte(strings.TrimSuffix(host, "."), '.')+1:]
			if _, err := strconv.ParseUint(strings.TrimSuffix(last, "."), 0, 64); err == nil {
				t.Fatalf("%q accepted with the numeric host %q", raw, host)
			}
		}
	})
}

// hookd's operational events reach only endpoints that subscribe to them
// by name: "*", an empty filter or "*.failing" never match a "hookd." type.
func TestSubscribesOpsEvents(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		types []string
		want  bool
	}{
		{nil, false},
		{[]string{"*"}, false},
		{[]string{"*.failing"}, false},
		{[]string{"*endpoint*"}, false},
		{[]string{"hookd.*"}, true},
		{[]string{"hookd.endpoint.failing"}, true},
		{[]string{"hookd.delivery.*"}, false},
		{[]string{"invoice.*", "hookd.endpoint.*"}, true},
	} {
		e := endpoint.Endpoint{EventTypes: c.types}
		require.Equal(t, c.want, e.Subscribes("hookd.endpoint.failing"), "%q", c.types)
	}
	star := endpoint.Endpoint{EventTypes: []string{"*"}}
	require.True(t, star.Subscribes("invoice.paid"))
	require.True(t, star.Subscribes("hookdx.paid"))
	require.True(t, endpoint.MatchType("*", "hookd.endpoint.failing"), "filters over stored deliveries keep plain matching")
}

func TestAlertSubject(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ep_1", endpoint.AlertSubject("hookd.endpoint.failing", []byte(`{"endpoint_id":"ep_1"}`)))
	require.Empty(t, endpoint.AlertSubject("invoice.paid", []byte(`{"endpoint_id":"ep_1"}`)))
	require.Empty(t, endpoint.AlertSubject("hookd.endpoint.failing", []byte(`not json`)))
}

func TestValidateOrdering(t *testing.T) {
	for _, o := range []endpoint.Ordering{"", endpoint.OrderingNone, endpoint.OrderingFIFO} {
		if err := endpoint.ValidateOrdering(o); err != nil {
			t.Errorf("%q: %v", o, err)
		}
	}
	for _, o := range []endpoint.Ordering{"FIFO", "lifo", " fifo"} {
		err := endpoint.ValidateOrdering(o)
		if !errors.Is(err, endpoint.ErrInvalid) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), endpoint.ErrInvalid.Error()+": "), "ordering: ") {
			t.Errorf("%q: %v, want an invalid ordering", o, err)
		}
	}
}
