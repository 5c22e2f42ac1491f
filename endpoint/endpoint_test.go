package endpoint_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/endpoint"
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
		EventTypes: []string{"invoice.*"}, Status: endpoint.StatusActive}
	require.NoError(t, ok.Validate())
	cases := map[string]func(e *endpoint.Endpoint){
		"no account":    func(e *endpoint.Endpoint) { e.Account = "" },
		"ftp url":       func(e *endpoint.Endpoint) { e.URL = "ftp://example.com" },
		"relative url":  func(e *endpoint.Endpoint) { e.URL = "/hook" },
		"creds in url":  func(e *endpoint.Endpoint) { e.URL = "https://u:p@example.com" },
		"no secret":     func(e *endpoint.Endpoint) { e.Secrets = nil },
		"bad secret":    func(e *endpoint.Endpoint) { e.Secrets = []string{"hunter2"} },
		"spaced type":   func(e *endpoint.Endpoint) { e.EventTypes = []string{"invoice paid"} },
		"bad status":    func(e *endpoint.Endpoint) { e.Status = "paused" },
		"negative rate": func(e *endpoint.Endpoint) { e.RatePerSec = -1 },
	}
	for name, mutate := range cases {
		e := ok
		e.Secrets = append([]string(nil), ok.Secrets...)
		mutate(&e)
		err := e.Validate()
		require.ErrorIs(t, err, endpoint.ErrInvalid, name)
		require.NotContains(t, err.Error(), "\n")
	}
}
