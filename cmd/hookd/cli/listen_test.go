package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestListenFlagsReachTheServer: the --listen defences, from flags and
// from HOOKD_* variables, become the HTTP server's config; the defaults
// are the documented ones.
func TestListenFlagsReachTheServer(t *testing.T) {
	cfg, err := parse(t, "run").Run.config()
	require.NoError(t, err)
	require.Equal(t, 1024, cfg.HTTP.MaxConns)
	require.Equal(t, 64, cfg.HTTP.MaxConnsPerClient)
	require.Equal(t, 30*time.Second, cfg.HTTP.ReadTimeout)
	require.Equal(t, 60*time.Second, cfg.HTTP.WriteTimeout)
	require.Equal(t, 120*time.Second, cfg.HTTP.IdleTimeout)

	t.Setenv("HOOKD_LISTEN_MAX_CONNS_PER_CLIENT", "7")
	cfg, err = parse(t, "run", "--listen-max-conns", "100", "--listen-idle-timeout", "5s").Run.config()
	require.NoError(t, err)
	require.Equal(t, 100, cfg.HTTP.MaxConns)
	require.Equal(t, 7, cfg.HTTP.MaxConnsPerClient)
	require.Equal(t, 5*time.Second, cfg.HTTP.IdleTimeout)
}

// TestBadListenFlagsExitTwoWithOneLine: bad caps and timeouts are refused
// before anything starts, with one line naming the flag.
func TestBadListenFlagsExitTwoWithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--listen-max-conns", "0"}, "--listen-max-conns: must be at least 1, got 0"},
		{[]string{"run", "--listen-max-conns", "10", "--listen-max-conns-per-client", "11"}, "--listen-max-conns-per-client: must be 1..10 (--listen-max-conns), got 11"},
		{[]string{"api", "--brokers", "127.0.0.1:1", "--listen-read-timeout", "0s"}, "--listen-read-timeout: must be at least 1ms, got 0s"},
		{[]string{"dispatch", "--brokers", "127.0.0.1:1", "--listen-idle-timeout=-1s"}, "--listen-idle-timeout: must be at least 1ms, got -1s"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, ExitUsage, code, "%v: %s", tc.args, stderr.String())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Len(t, lines, 1, stderr.String())
		require.Equal(t, "hookd: "+tc.want, lines[0])
	}
}
