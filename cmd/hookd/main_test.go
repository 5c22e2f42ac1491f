package main_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
)

// TestBadInputExitsTwoWithOneLine runs the binary with each kind of bad
// input of the foundation issue and expects one clear line and exit 2,
// quickly, with no panic or stack trace.
func TestBadInputExitsTwoWithOneLine(t *testing.T) {
	t.Parallel()
	hookd := proctest.Binary(t, "hookd")
	db := pgtest.NewUnmigrated(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { busy.Close() }) // not defer: the parallel subtests run after this function returns

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"run", "--frobnicate"}, "unknown flag --frobnicate"},
		{"bad duration", []string{"run", "--attempt-retention", "abc"}, `--attempt-retention: expected duration but got "abc"`},
		{"bad retry schedule", []string{"run", "--retry-schedule", "30s,10s"}, "retry schedule: 10s must be longer than the tier before it (30s)"},
		{"bad partitions", []string{"run", "--database-url", db.URL, "--partitions", "0", "--data-dir", t.TempDir()}, "partitions: must be between 1 and 10000, got 0"},
		{"bad database url", []string{"run", "--database-url", "postgres://%zz", "--data-dir", t.TempDir()}, "database url:"},
		{"unreachable postgres", []string{"migrate", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, "database 127.0.0.1:1 unreachable"},
		{"unreachable brokers", []string{"run", "--database-url", db.URL, "--brokers", "127.0.0.1:1", "--listen", "127.0.0.1:0"}, "kafka brokers 127.0.0.1:1 unreachable"},
		{"bad broker address", []string{"run", "--database-url", db.URL, "--brokers", "nohostport", "--listen", "127.0.0.1:0"}, `brokers: "nohostport" is not host:port`},
		{"http port in use", []string{"run", "--database-url", db.URL, "--listen", busy.Addr().String(), "--data-dir", t.TempDir()}, "listen " + busy.Addr().String() + ": address already in use"},
		{"kafka port in use", []string{"run", "--database-url", db.URL, "--listen", "127.0.0.1:0", "--kafka-listen", busy.Addr().String(), "--data-dir", t.TempDir()}, "kafka listen " + busy.Addr().String() + ": address already in use"},
		{"bad log format", []string{"--log-format", "xml", "run"}, "--log-format must be one of"},
		{"bad dedupe window", []string{"router", "--dedupe-window", "10s"}, "--dedupe-window: must be between 1m and 168h0m0s, got 10s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			args := append([]string{"--log-level", "error"}, tc.args...)
			if tc.name == "bad log format" {
				args = tc.args
			}
			code, _, stderr := proctest.Run(t, 30*time.Second, hookd, nil, args...)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			require.Len(t, lines, 1, "one line, got: %q", stderr)
			require.True(t, strings.HasPrefix(lines[0], "hookd: "), lines[0])
			require.Contains(t, lines[0], tc.want)
			require.NotContains(t, stderr, "goroutine")
			require.Less(t, time.Since(start), 15*time.Second, "bad input must fail within seconds")
		})
	}
}

func TestMigrateTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	hookd := proctest.Binary(t, "hookd")
	db := pgtest.NewUnmigrated(t)
	code, out, stderr := proctest.Run(t, 30*time.Second, hookd, nil, "migrate", "--database-url", db.URL)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "applied")
	code, out, stderr = proctest.Run(t, 30*time.Second, hookd, []string{"DATABASE_URL=" + db.URL}, "migrate")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "schema up to date at version")
}

// TestRunServesThenStopsOnSIGTERMAndKeepsRecords starts hookd on the
// embedded broker, checks /readyz and the topics with kcat, produces a record
// with kcat, stops with SIGTERM (exit 0), starts again on the same
// data dir and reads the record back.
func TestRunServesThenStopsOnSIGTERMAndKeepsRecords(t *testing.T) {
	t.Parallel()
	hookd := proctest.Binary(t, "hookd")
	db := pgtest.NewUnmigrated(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	kafkaAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	// Slot names are cluster-wide: each test's relay has its own.
	env := []string{"DATABASE_URL=" + db.URL, "HOOKD_DATA_DIR=" + dataDir, "HOOKD_KAFKA_LISTEN=" + kafkaAddr, "HOOKD_LISTEN=" + httpAddr, "HOOKD_PARTITIONS=3",
		"HOOKD_RELAY_SLOT=" + db.Name}

	p := proctest.Start(t, hookd, append(env, "GOGC=50"), "run", "--log-format", "json")
	p.WaitReady(httpAddr, 60*time.Second)
	require.Equal(t, "50", gcPercent(t, httpAddr), "GOGC from the environment")

	kcat, err := exec.LookPath("kcat")
	require.NoError(t, err, "kcat is needed (make test installs it)")
	out, err := exec.Command(kcat, "-b", kafkaAddr, "-L").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, topic := range []string{"webhooks.events", "webhooks.deliveries", "webhooks.retry.30s", "webhooks.retry.24h", "webhooks.dlq"} {
		require.Contains(t, string(out), fmt.Sprintf("topic %q with 3 partitions", topic))
	}

	value := fmt.Sprintf(`{"account":"acct_1","type":"test.persist","data":{"n":%d}}`, time.Now().UnixNano())
	produce := exec.Command(kcat, "-b", kafkaAddr, "-P", "-t", "webhooks.events")
	produce.Stdin = strings.NewReader(value + "\n")
	out, err = produce.CombinedOutput()
	require.NoError(t, err, string(out))

	p.Signal(syscall.SIGTERM)
	require.Equal(t, 0, p.Wait(30*time.Second), "SIGTERM must exit 0; stderr:\n%s", p.Stderr())
	require.Contains(t, p.Stderr(), `"msg":"hookd stopped"`)

	p2 := proctest.Start(t, hookd, env, "run")
	p2.WaitReady(httpAddr, 60*time.Second)
	want := "200" // hookd's default
	if v, set := os.LookupEnv("GOGC"); set {
		want = v
	}
	require.Equal(t, want, gcPercent(t, httpAddr), "the collector's target without GOGC")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.ConsumeTopics("webhooks.events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	found := false
	for !found {
		fetches := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "record produced before the restart was not read back")
		fetches.EachRecord(func(r *kgo.Record) {
			if string(r.Value) == value {
				found = true
			}
		})
	}
	p2.Signal(syscall.SIGINT)
	require.Equal(t, 0, p2.Wait(30*time.Second))
}

// gcPercent is the go_gc_gogc_percent a hookd serving at addr reports.
func gcPercent(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "go_gc_gogc_percent "); ok {
			return v
		}
	}
	t.Fatalf("no go_gc_gogc_percent in /metrics")
	return ""
}
