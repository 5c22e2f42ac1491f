package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// receiver is a real 127.0.0.1 webhook endpoint that answers 503 while
// down and counts 2xx receipts by webhook-id once fixed.
type receiver struct {
	up   atomic.Bool
	mu   sync.Mutex
	got  map[string]int
	srv  *httptest.Server
	hits atomic.Int64
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		if !r.up.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		r.mu.Lock()
		r.got[req.Header.Get("webhook-id")]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) receipts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.got))
	for k, v := range r.got {
		out[k] = v
	}
	return out
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	wait.For(t, timeout, what, cond)
}

// Issue 6 acceptance with the real binaries: an endpoint down long enough
// for its deliveries to be dead-lettered (1s,2s schedule), then fixed;
// hookctl dlq list shows them, --dry-run counts them, a replay killed with
// -9 halfway and run again delivers each exactly once with its original
// webhook-id, the audit row exists, and deliveries show gives the timeline
// retried -> dead-lettered -> replayed -> delivered.
func TestAcceptanceDeadLetterReplayEndToEnd(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rcv := newReceiver(t)
	hookd := proctest.Binary(t, "hookd")
	hookctl := proctest.Binary(t, "hookctl")
	kafkaAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	common := []string{"DATABASE_URL=" + db.URL, "HOOKD_RETRY_SCHEDULE=1s,2s", "HOOKD_BROKERS=" + kafkaAddr,
		"HOOKD_ALLOW_PRIVATE_NETWORKS=true"} // the receiver is on 127.0.0.1
	daemonEnv := []string{"DATABASE_URL=" + db.URL, "HOOKD_RETRY_SCHEDULE=1s,2s", "HOOKD_DATA_DIR=" + t.TempDir(),
		"HOOKD_KAFKA_LISTEN=" + kafkaAddr, "HOOKD_LISTEN=" + httpAddr, "HOOKD_PARTITIONS=3", "HOOKD_ADMIN_TOKEN=e2e-admin"}
	d := proctest.Start(t, hookd, daemonEnv, "run", "--allow-private-networks", "--no-relay", "--log-level", "warn")
	d.WaitReady(httpAddr, 60*time.Second)

	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return proctest.Run(t, 60*time.Second, hookctl, common, args...)
	}
	code, out, errOut := ctl("endpoints", "add", "--event-type", "*", "--account", "acct_e2e", "--url", rcv.srv.URL+"/hook", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var ep struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &ep))

	// An endpoint receives the events fanned out once hookd's endpoint
	// index has seen it (LISTEN/NOTIFY, usually milliseconds; longer on a
	// loaded machine): wait for that, as the contract is "subscribed at
	// fan-out time".
	eventually(t, 30*time.Second, "the endpoint index to hold the endpoint", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\nhookd_endpoint_index_endpoints 1\n")
	})

	// Events on the ingress topic, as any Kafka client would write them.
	// Six, so that their 18 failed requests stay under the circuit
	// breaker's 20-request minimum: a tripped breaker stays open 30s and
	// would dead-letter the replays again on a 1s,2s schedule.
	const n = 6
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr))
	require.NoError(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "webhooks.events", Key: []byte("acct_e2e"),
			Value: fmt.Appendf(nil, `{"id":"evt_e2e_%02d","account":"acct_e2e","type":"invoice.paid","data":{"i":%d}}`, i, i)})
	}
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())

	// Down long enough: every delivery goes 1s, 2s, then the DLQ.
	eventually(t, 60*time.Second, "every delivery dead-lettered", func() bool {
		code, out, _ := ctl("dlq", "list", "--endpoint", ep.ID, "-o", "json")
		var entries []map[string]any
		return code == 0 && json.Unmarshal([]byte(out), &entries) == nil && len(entries) == n
	})
	require.Empty(t, rcv.receipts())
	require.EqualValues(t, 3*n, rcv.hits.Load(), "each tried 3 times")

	code, out, errOut = ctl("dlq", "list", "--account", "acct_e2e", "--since", "1h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "retries_exhausted")
	require.Contains(t, out, fmt.Sprintf("%d dead letter(s)", n))
	code, out, errOut = ctl("dlq", "replay", "--endpoint", ep.ID, "--reason", "receiver fixed (INC-42)", "--actor", "oncall", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, fmt.Sprintf("would replay %d of %d", n, n))

	// Fixed. Replay slowly, kill -9 halfway, run the same command again.
	rcv.up.Store(true)
	replayArgs := append([]string{"--database-url", db.URL, "--brokers", kafkaAddr, "--retry-schedule", "1s,2s"},
		"dlq", "replay", "--endpoint", ep.ID, "--reason", "receiver fixed (INC-42)", "--actor", "oncall")
	p := proctest.Start(t, hookctl, nil, append(replayArgs, "--rate", "2")...)
	eventually(t, 30*time.Second, "the replay to be under way", func() bool {
		rs, err := db.Store.ListReplays(context.Background(), store.ListReplaysParams{})
		return err == nil && len(rs) > 0 && !rs[0].DryRun && rs[0].Replayed >= 2
	})
	p.Kill()
	rs, err := db.Store.ListReplays(context.Background(), store.ListReplaysParams{})
	require.NoError(t, err)
	require.Less(t, rs[0].Replayed, int64(n), "killed halfway")
	code, out, errOut = proctest.Run(t, 60*time.Second, hookctl, nil, replayArgs...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, fmt.Sprintf("%d replayed", n))

	eventually(t, 60*time.Second, "every replayed delivery received", func() bool { return len(rcv.receipts()) == n })
	// Wait for the attempt log to record them all delivered, then check no
	// webhook-id arrived twice.
	eventually(t, 60*time.Second, "the delivery log to show them delivered", func() bool {
		ds, err := db.Store.ListDeliveries(context.Background(), store.ListDeliveriesParams{EndpointID: ep.ID, Status: "delivered", Limit: 100})
		return err == nil && len(ds) == n
	})
	for i := range n {
		id := fmt.Sprintf("evt_e2e_%02d", i)
		require.Equal(t, 1, rcv.receipts()[id], "webhook-id %s received %d times", id, rcv.receipts()[id])
	}

	// The audit row.
	code, out, errOut = ctl("dlq", "replays", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var audit []store.Replay
	require.NoError(t, json.Unmarshal([]byte(out), &audit))
	var found bool
	for _, a := range audit {
		if !a.DryRun && a.Reason == "receiver fixed (INC-42)" {
			found = true
			require.Equal(t, "oncall", a.Actor)
			require.Equal(t, "done", a.Status)
			require.EqualValues(t, n, a.Replayed)
			require.Contains(t, string(a.Filter), ep.ID)
		}
	}
	require.True(t, found, out)

	// The full timeline of one delivery.
	code, out, errOut = ctl("deliveries", "show", "evt_e2e_04")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"webhooks.deliveries", "webhooks.retry.1s", "webhooks.retry.2s", "dead_letter", "503", "204", "rpl_", "delivered"} {
		require.Contains(t, out, want)
	}

	// The API sees it too.
	req, _ := http.NewRequest("GET", "http://"+httpAddr+"/v1/events/evt_e2e_04/deliveries", nil)
	req.Header.Set("Authorization", "Bearer e2e-admin")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
}
