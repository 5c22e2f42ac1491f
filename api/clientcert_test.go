package api

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/tlstest"
)

func pemFiles(t *testing.T, c tlstest.Cert) (string, string) {
	t.Helper()
	cb, err := os.ReadFile(c.CertFile)
	require.NoError(t, err)
	kb, err := os.ReadFile(c.KeyFile)
	require.NoError(t, err)
	return string(cb), string(kb)
}

// A client certificate over the API: create and update take it with its
// key, answers show its subject and expiry and never the key, "" removes
// it, and a bad pair is a 400 naming the field that writes nothing.
func TestEndpointClientCertOverAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ca := tlstest.NewCA(t)
	certA, keyA := pemFiles(t, ca.Client(t, "hookd-a"))
	certB, keyB := pemFiles(t, ca.Client(t, "hookd-b"))
	q := func(s string) string { v, _ := json.Marshal(s); return string(v) }

	var raw map[string]any
	require.Equal(t, 201, b.do(t, b.tokA, "POST", "/v1/endpoints",
		`{"event_types":["*"],"url":"https://x.example.com","client_cert":`+q(certA)+`,"client_key":`+q(keyA)+`}`, &raw))
	require.Equal(t, "CN=hookd-a", raw["client_cert_subject"])
	exp, err := time.Parse(time.RFC3339, raw["client_cert_expires_at"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(23*time.Hour), exp, 2*time.Hour)
	require.NotContains(t, raw, "client_key", "the key is never shown")
	id := raw["id"].(string)
	stored, err := b.db.Store.GetEndpoint(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, keyA, stored.ClientKey)

	var got endpointOut
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+id, `{"client_cert":`+q(certB)+`,"client_key":`+q(keyB)+`}`, &got))
	require.Equal(t, "CN=hookd-b", got.ClientCertSubject)
	got = endpointOut{}
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", "/v1/endpoints/"+id, `{"description":"kept"}`, &got))
	require.Equal(t, "CN=hookd-b", got.ClientCertSubject, "a patch without it keeps it")

	patch := "/v1/endpoints/" + id
	url := `"event_types":["*"],"url":"https://x.example.com"`
	cases := []struct{ method, path, body, want string }{
		{"POST", "/v1/endpoints", `{` + url + `,"client_cert":` + q(certA) + `}`, "client_key: required with client_cert"},
		{"POST", "/v1/endpoints", `{` + url + `,"client_cert":` + q(certA) + `,"client_key":` + q(keyB) + `}`, "client_key: does not match the public key of client_cert"},
		{"POST", "/v1/endpoints", `{` + url + `,"client_cert":"x","client_key":` + q(keyA) + `}`, "client_cert:"},
		{"PATCH", patch, `{"client_cert":` + q(certA) + `}`, "client_cert, client_key: give both"},
		{"PATCH", patch, `{"client_cert":` + q(certA) + `,"client_key":` + q(keyB) + `}`, "client_key: does not match"},
	}
	before := b.state(t)
	for _, c := range cases {
		var e apiError
		require.Equal(t, 400, b.do(t, b.tokA, c.method, c.path, c.body, &e), "%s %.80s: %s", c.method, c.body, e.Error.Message)
		require.Contains(t, e.Error.Message, c.want)
		require.NotContains(t, e.Error.Message, "PRIVATE KEY")
	}
	require.Equal(t, before, b.state(t), "a refused request wrote something")

	raw = nil
	require.Equal(t, 200, b.do(t, b.tokA, "PATCH", patch, `{"client_cert":"","client_key":""}`, &raw))
	require.NotContains(t, raw, "client_cert_subject")
}
