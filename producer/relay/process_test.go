package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/proctest"
)

// TestKill9MidStream runs `hookd relay` as a real process, kills it with
// SIGKILL while thousands of outbox events stream, starts it again and
// checks that every committed event reached the events topic exactly
// once.
func TestKill9MidStream(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; builds the hookd binary")
	}
	t.Parallel()
	e := setup(t)
	bin := proctest.Binary(t, "hookd")
	events := collect(t, e.kafka, e.names.Events)
	// `hookd relay` runs the relay alone; until the CLI has it, `hookd run`
	// with external brokers runs it among every other role.
	role := "run"
	if _, out, _ := proctest.Run(t, 30*time.Second, bin, nil, "--help"); strings.Contains(out, "\n  relay") {
		role = "relay"
	}
	t.Logf("running hookd %s", role)
	startRelay := func() (*proctest.Proc, string) {
		listen := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
		p := proctest.Start(t, bin, []string{"HOOKD_LOG_LEVEL=warn"}, role,
			"--database-url", e.db.URL, "--brokers", e.kafka.Addrs[0], "--partitions", "3",
			"--listen", listen, "--relay-slot", e.slot)
		p.WaitReady(listen, 30*time.Second)
		return p, listen
	}

	first, _ := startRelay()
	const total, perTx = 5000, 10
	var wg sync.WaitGroup
	wg.Go(func() {
		ctx := context.Background()
		for lo := 0; lo < total; lo += perTx {
			_, err := e.db.Store.Pool().Exec(ctx, `INSERT INTO webhooks.outbox (id, account, type)
				SELECT 'k9_' || g, 'acct_' || (g % 7), 'invoice.paid' FROM generate_series($1::int, $2::int - 1) g`, lo, lo+perTx)
			if err != nil {
				t.Errorf("insert: %v", err)
				return
			}
		}
	})
	waitFor(t, "the relay to be mid-stream", 30*time.Second, func() bool { return len(events.eventIDs(t)) >= total/5 })
	first.Kill()
	killedAt := len(events.eventIDs(t))
	wg.Wait()

	startRelay()
	waitFor(t, "every committed event after the restart", 60*time.Second, func() bool { return len(events.eventIDs(t)) == total })
	ids := events.eventIDs(t)
	dups := 0
	for i := range total {
		c := ids[fmt.Sprintf("k9_%d", i)]
		if c == 0 {
			t.Fatalf("event k9_%d was never published", i)
		}
		dups += c - 1
	}
	t.Logf("kill -9 after %d of %d events published; after restart all %d published, %d published twice or more", killedAt, total, total, dups)
	// The restarted relay finds what the killed one published in the
	// events topic's tail and skips it.
	if dups != 0 {
		t.Fatalf("%d events published twice or more after kill -9", dups)
	}
}
