package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/cmd/internal/cmdline"
	"github.com/hookd/hookd/internal/topics"
)

// parse parses args into a fresh CLI without running anything.
func parse(t *testing.T, args ...string) *CLI {
	t.Helper()
	var cli CLI
	parser, err := cmdline.New(&cli, "hookd", description, io.Discard, io.Discard, nil)
	require.NoError(t, err)
	_, err = parser.Parse(args)
	require.NoError(t, err)
	return &cli
}

// TestEndpointLimitFlagsReachTheDispatcher: --max-endpoint-in-flight and
// --request-timeout (the ceiling of endpoint timeouts) become the
// dispatcher's MaxEndpointInFlight and Timeout, for run and dispatch.
func TestEndpointLimitFlagsReachTheDispatcher(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"run", "dispatch"} {
		cli := parse(t, cmd, "--max-endpoint-in-flight", "16", "--request-timeout", "7s", "--allow-private-networks")
		f := cli.Dispatch.DispatchFlags
		if cmd == "run" {
			f = cli.Run.DispatchFlags
		}
		require.NoError(t, f.validate())
		c := f.dispatcherConfig(topics.Config{})
		require.Equal(t, 16, c.MaxEndpointInFlight, cmd)
		require.Equal(t, 7*time.Second, c.Timeout, cmd)
		require.True(t, c.AllowPrivateNetworks, cmd)
	}
	c := parse(t, "dispatch").Dispatch.dispatcherConfig(topics.Config{})
	require.Equal(t, 64, c.MaxEndpointInFlight, "default")
	require.Equal(t, 10*time.Second, c.Timeout, "default")
}

// TestBadEndpointLimitsExitTwoWithOneLine: bad limits are refused before
// anything starts, with one line naming the flag.
func TestBadEndpointLimitsExitTwoWithOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--max-endpoint-in-flight", "0"}, "--max-endpoint-in-flight: must be at least 1, got 0"},
		{[]string{"dispatch", "--max-endpoint-in-flight", "2"}, "--max-in-flight: 4 is more than --max-endpoint-in-flight 2"},
		{[]string{"dispatch", "--request-timeout", "0s"}, "--request-timeout: must be positive, got 0s"},
		{[]string{"api", "--max-endpoint-in-flight=-1"}, "--max-endpoint-in-flight: must be at least 1, got -1"},
		{[]string{"api", "--brokers", "127.0.0.1:1", "--request-timeout", "800h"}, "api max endpoint timeout: must be 1ms..596h31m23.647s, got 800h0m0s"},
		{[]string{"run", "--max-envelope-bytes", "5"}, "--max-envelope-bytes: must be between 1024 and 983040, got 5"},
		{[]string{"router", "--max-envelope-bytes", "1048576"}, "--max-envelope-bytes: must be between 1024 and 983040, got 1048576"},
		{[]string{"relay", "--max-envelope-bytes", "0"}, "--max-envelope-bytes: must be between 1024 and 983040, got 0"},
		{[]string{"run", "--portal-accent-color", "red"}, `--portal-*: portal accent color: must be #rgb or #rrggbb, got "red"`},
		{[]string{"api", "--brokers", "127.0.0.1:1", "--portal-logo-url", "https://cdn.example/l.png"},
			`--portal-*: portal logo url: must be a path on the portal's own origin (/...) or a data: image, got "https://cdn.example/l.png"`},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), tc.args, &stdout, &stderr)
		require.Equal(t, ExitUsage, code, "%v: %s", tc.args, stderr.String())
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		require.Len(t, lines, 1, stderr.String())
		require.Equal(t, "hookd: "+tc.want, lines[0])
	}
}

// TestEndpointLimitFlagsReachTheAPI: the same flags configure the /v1
// API's checks at create and update, for hookd run, dispatch and api.
func TestEndpointLimitFlagsReachTheAPI(t *testing.T) {
	t.Parallel()
	args := []string{"--max-endpoint-in-flight", "16", "--request-timeout", "7s", "--allow-private-networks"}
	cli := parse(t, append([]string{"run"}, args...)...)
	cfg, err := cli.Run.config()
	require.NoError(t, err)
	require.Equal(t, 16, cfg.API.MaxEndpointInFlight)
	require.Equal(t, 7*time.Second, cfg.API.MaxTimeout)
	require.True(t, cfg.API.AllowPrivateNetworks)

	for _, cmd := range []string{"dispatch", "api"} {
		cli := parse(t, append([]string{cmd}, args...)...)
		f := cli.Dispatch.EndpointLimitFlags
		if cmd == "api" {
			f = cli.API.EndpointLimitFlags
		}
		c, err := f.apiConfig()
		require.NoError(t, err, cmd)
		require.Equal(t, 16, c.MaxEndpointInFlight, cmd)
		require.Equal(t, 7*time.Second, c.MaxTimeout, cmd)
		require.True(t, c.AllowPrivateNetworks, cmd)
	}
	cfg, err = parse(t, "run").Run.config()
	require.NoError(t, err)
	require.Equal(t, 64, cfg.API.MaxEndpointInFlight, "default")
	require.Equal(t, 10*time.Second, cfg.API.MaxTimeout, "default")
	require.False(t, cfg.API.AllowPrivateNetworks, "default")
}
