package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// startServer runs a server with cfg on 127.0.0.1 until the test ends and
// returns its base URL.
func startServer(t *testing.T, cfg Config) string {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	s, err := Listen(cfg, Deps{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return "http://" + s.Addr()
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	cl := &http.Client{Timeout: 30 * time.Second}
	resp, err := cl.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// --pprof is off by default: nothing answers at /debug/pprof/.
func TestPprofOffByDefault(t *testing.T) {
	t.Parallel()
	base := startServer(t, Config{})
	status, _ := get(t, base+"/debug/pprof/", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = get(t, base+"/debug/pprof/profile?seconds=1", "")
	require.Equal(t, http.StatusNotFound, status)
}

// With Pprof and no admin token the profiles answer to anyone.
func TestPprofOn(t *testing.T) {
	t.Parallel()
	base := startServer(t, Config{Pprof: true})
	status, body := get(t, base+"/debug/pprof/", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "goroutine")
	status, body = get(t, base+"/debug/pprof/profile?seconds=1", "")
	require.Equal(t, http.StatusOK, status)
	require.NotEmpty(t, body, "a CPU profile")
	status, _ = get(t, base+"/debug/pprof/heap", "")
	require.Equal(t, http.StatusOK, status)
}

// With an admin token configured, pprof requires it.
func TestPprofRequiresAdminToken(t *testing.T) {
	t.Parallel()
	base := startServer(t, Config{Pprof: true, AdminToken: "s3cret-admin"})
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1", "/debug/pprof/cmdline"} {
		status, _ := get(t, base+path, "")
		require.Equal(t, http.StatusUnauthorized, status, path)
		status, _ = get(t, base+path, "wrong")
		require.Equal(t, http.StatusUnauthorized, status, path)
	}
	status, body := get(t, base+"/debug/pprof/heap?debug=1", "s3cret-admin")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "heap profile")
	// Other routes are unaffected by the token.
	status, _ = get(t, base+"/healthz", "")
	require.Equal(t, http.StatusOK, status)
}
