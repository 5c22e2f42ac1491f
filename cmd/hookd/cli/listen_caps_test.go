package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/retrytiers"
)

// TestListenAtItsCapsDeliveriesCarryOn runs `hookd run` (every role, the
// embedded broker) with small --listen caps, holds connections at one
// client's cap and then at the total cap, and checks that deliveries, the
// broker and (below the total cap) /readyz carry on, and that --listen
// serves again once the connections close.
func TestListenAtItsCapsDeliveriesCarryOn(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var delivered atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { delivered.Add(1) }))
	t.Cleanup(recv.Close)
	_, err := db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: "ep_1", Account: "acct_1", URL: recv.URL + "/hook", Secrets: []string{endpoint.NewSecret()}})
	require.NoError(t, err)

	kafkaAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("hookd"), kong.Vars{"retry_schedule": retrytiers.DefaultSchedule})
	require.NoError(t, err)
	_, err = parser.Parse([]string{"run", "--database-url", db.URL, "--data-dir", t.TempDir(), "--kafka-listen", kafkaAddr,
		"--listen", httpAddr, "--partitions", "2", "--allow-private-networks", "--no-migrate", "--no-relay",
		"--listen-max-conns", "16", "--listen-max-conns-per-client", "8"})
	require.NoError(t, err)
	cfg, err := cli.Run.config()
	require.NoError(t, err)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(runCtx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), cli.Run.roles())
	}()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})

	readyz := func() int {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
		res, err := hc.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	// deliver produces an event with a new Kafka client (a new connection
	// to the broker) and waits for the receiver to get it.
	n := 0
	deliver := func(what string) {
		n++
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
		require.NoError(t, err)
		defer cl.Close()
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "webhooks.events",
			Value: fmt.Appendf(nil, `{"account":"acct_1","type":"test.caps","data":{"n":%d}}`, n)}).FirstErr(), what)
		want := int64(n)
		wait.For(t, 30*time.Second, "a delivery "+what, func() bool { return delivered.Load() >= want })
	}
	hold := func(from string, count int) []net.Conn {
		var cs []net.Conn
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		for range count {
			c, err := d.Dial("tcp", httpAddr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			cs = append(cs, c)
		}
		return cs
	}

	wait.For(t, time.Minute, "ready", func() bool { return readyz() == http.StatusOK })
	deliver("before")

	held := hold("127.0.0.2", 12) // 4 beyond the client's cap
	wait.For(t, 10*time.Second, "ready with one client at its cap", func() bool { return readyz() == http.StatusOK })
	deliver("with one client at its cap")

	held = append(held, hold("127.0.0.3", 8)...) // 16: the total cap
	wait.For(t, 10*time.Second, "--listen at its total cap", func() bool { return readyz() == 0 })
	deliver("at the total cap")

	for _, c := range held {
		c.Close()
	}
	wait.For(t, 10*time.Second, "ready again", func() bool { return readyz() == http.StatusOK })
	deliver("after")
}
