package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	hookctlcli "github.com/hookd/hookd/cmd/hookctl/cli"
	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
)

type env struct {
	db      *pgtest.DB
	cluster *kafkatest.Cluster
	names   topics.Names
	parts   int
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := topics.Config{Partitions: 3}
	cfg.SetDefaults()
	return &env{db: pgtest.New(t), cluster: kafkatest.NewProvisioned(t, cfg), names: topics.NamesFor(cfg), parts: 3}
}

func (e *env) args() []string {
	return []string{"--database-url", e.db.URL, "--brokers", strings.Join(e.cluster.Addrs, ",")}
}

func (e *env) run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := hookctlcli.Main(context.Background(), append(e.args(), args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

func (e *env) endpoint(t *testing.T, id, account string, disabled bool) {
	t.Helper()
	ep := endpoint.Endpoint{ID: id, Account: account, URL: "https://example.com/" + id, Secrets: []string{endpoint.NewSecret()},
		Status: endpoint.StatusActive}
	if disabled {
		ep.Status, ep.DisabledReason = endpoint.StatusDisabled, "gone fishing"
	}
	_, err := e.db.Store.CreateEndpoint(context.Background(), ep)
	require.NoError(t, err)
}

func partitionOf(key string, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: []byte(key)}, n))
}

// deadLetters produces n dead letters for ep, as the dispatcher would.
func (e *env) deadLetters(t *testing.T, ep, account, eventType string, n int) []string {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	var ids []string
	for i := range n {
		evt := fmt.Sprintf("evt_%s_%d", ep, i)
		ids = append(ids, evt)
		body, err := delivery.Body(evt, eventType, time.Now(), []byte(`{}`))
		require.NoError(t, err)
		d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: eventType, EndpointID: ep, Account: account,
			EventCreated: time.Now(), Attempt: 3, Body: body}
		src := d.Record(e.names.Retry[0])
		src.Partition = partitionOf(ep, e.parts)
		recs = append(recs, deadletter.Record(e.names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic, Attempts: 3,
			LastStatus: 500, ErrorClass: "http_5xx", Reason: deadletter.ReasonRetriesExhausted, DeadAt: time.Now()}))
	}
	cl := e.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(context.Background(), recs...).FirstErr())
	return ids
}

// replayedEvents counts, per event id, the replayed records on the
// deliveries topic.
func (e *env) replayedEvents(t *testing.T) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(e.cluster.Client(t))
	ends, err := adm.ListEndOffsets(ctx, e.names.Deliveries)
	require.NoError(t, err)
	want := map[int32]int64{}
	start := map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
			start[o.Partition] = kgo.NewOffset().AtStart()
		}
	})
	out := map[string]int{}
	if len(want) == 0 {
		return out
	}
	cl := e.cluster.Client(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{e.names.Deliveries: start}))
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) {
			d, err := delivery.Decode(r)
			require.NoError(t, err)
			if d.ReplayID != "" {
				out[d.EventID]++
			}
			if r.Offset+1 >= want[r.Partition] {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

func TestDLQListAndReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.endpoint(t, "ep_a", "acct_a", false)
	e.endpoint(t, "ep_off", "acct_b", true)
	ids := e.deadLetters(t, "ep_a", "acct_a", "invoice.paid", 12)
	e.deadLetters(t, "ep_off", "acct_b", "customer.created", 4)

	code, out, errOut := e.run(t, "dlq", "list")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "16 dead letter(s)")
	require.Contains(t, out, ids[0])

	code, out, errOut = e.run(t, "dlq", "list", "--endpoint", "ep_a", "--type", "invoice.*", "--since", "1h", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var entries []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &entries))
	require.Len(t, entries, 12)
	require.Equal(t, "retries_exhausted", entries[0]["reason"])

	code, out, _ = e.run(t, "dlq", "list", "--account", "acct_b", "--limit", "2")
	require.Equal(t, 0, code)
	require.Contains(t, out, "2 dead letter(s) (stopped at --limit 2)")

	// Bad input: one line, exit 2.
	for _, args := range [][]string{
		{"dlq", "list", "--since", "yesterday"},
		{"dlq", "replay", "--endpoint", "ep_a"},                        // --reason missing
		{"dlq", "replay", "--reason", "x", "--endpoint", "ep_off"},     // disabled
		{"dlq", "replay", "--reason", "x", "--endpoint", "ep_nope"},    // unknown
		{"dlq", "list", "--since", "1h", "--until", "2h"},              // empty range
		{"dlq", "replay", "--reason", "x", "--rate", "-1"},             // negative rate
		{"dlq", "replay", "--reason", "x", "--replay-id", "has space"}, // bad id
		{"deliveries", "list"},                                         // no endpoint
		{"deliveries", "show", "evt_nope"},                             // unknown
		{"endpoints", "resend", "ep_a"},                                // --since missing
		{"endpoints", "resend", "ep_a", "--since", "soon"},             // bad time
		{"tokens", "create", "--account", "has space"},                 // bad account
		{"dlq", "replay", "--reason", "x", "--endpoint", "ep_a", "--limit", "-2"},
	} {
		code, _, errOut := e.run(t, args...)
		require.Equal(t, 2, code, "%v: %s", args, errOut)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(errOut), "\n")+1, "%v: %s", args, errOut)
	}

	code, out, errOut = e.run(t, "dlq", "replay", "--reason", "INC-7", "--actor", "bob", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "would replay 12 of 16 matching dead letter(s); 4 would be skipped")
	require.Contains(t, out, "skip: endpoint disabled")
	require.Empty(t, e.replayedEvents(t))

	code, out, errOut = e.run(t, "dlq", "replay", "--reason", "INC-7", "--actor", "bob", "--account", "acct_a", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var res struct {
		ID       string
		Status   string
		Replayed int
		Actor    string
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, "done", res.Status)
	require.Equal(t, 12, res.Replayed)
	got := e.replayedEvents(t)
	require.Len(t, got, 12)
	for _, id := range ids {
		require.Equal(t, 1, got[id], id)
	}

	code, out, _ = e.run(t, "dlq", "replay", "--reason", "INC-7", "--actor", "bob", "--account", "acct_a")
	require.Equal(t, 0, code)
	require.Contains(t, out, "already completed")
	require.Len(t, e.replayedEvents(t), 12)

	code, out, _ = e.run(t, "dlq", "replays")
	require.Equal(t, 0, code)
	require.Contains(t, out, res.ID)
	require.Contains(t, out, "bob")
	require.Contains(t, out, "(dry run)")

	// Resend to the disabled endpoint after enabling it.
	code, _, errOut = e.run(t, "endpoints", "resend", "ep_off", "--since", "1h")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "disabled")
	code, _, _ = e.run(t, "endpoints", "enable", "ep_off")
	require.Equal(t, 0, code)
	code, out, errOut = e.run(t, "endpoints", "resend", "ep_off", "--since", "1h", "--actor", "carol")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "4 replayed")
	require.Len(t, e.replayedEvents(t), 16)
	rs, err := e.db.Store.ListReplays(context.Background(), store.ListReplaysParams{})
	require.NoError(t, err)
	require.Equal(t, "resend", rs[0].Kind)
	require.Equal(t, "carol", rs[0].Actor)
}

func TestDeliveriesListAndShow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	st := db.Store
	now := time.Now().UTC().Truncate(time.Millisecond)
	dlv := delivery.ID("evt_1", "ep_a")
	require.NoError(t, st.InsertPendingDeliveries(ctx, []store.PendingDelivery{{ID: dlv, EventID: "evt_1", EndpointID: "ep_a",
		Account: "acct_a", EventType: "invoice.paid", EventCreated: now}}))
	base := attempt.Record{DeliveryID: dlv, EventID: "evt_1", EventType: "invoice.paid", EndpointID: "ep_a", Account: "acct_a",
		EventCreated: now}
	a1, a2, a3 := base, base, base
	a1.AttemptID, a1.Attempt, a1.Tier, a1.StartedAt, a1.Duration = "att_1", 1, "webhooks.deliveries", now, 120*time.Millisecond
	a1.StatusCode, a1.Outcome, a1.ErrorClass, a1.ResponseExcerpt, a1.NextAction, a1.NextDueAt = 503, attempt.OutcomeRetry, "http_5xx", "upstream down", attempt.NextRetry, now.Add(time.Second)
	a2.AttemptID, a2.Attempt, a2.Tier, a2.StartedAt, a2.Duration = "att_2", 2, "webhooks.retry.1s", now.Add(time.Second), 80*time.Millisecond
	a2.StatusCode, a2.Outcome, a2.ErrorClass, a2.NextAction = 503, attempt.OutcomeRetry, "http_5xx", attempt.NextDeadLetter
	a2.DLQ, a2.DeadReason = &attempt.Position{Topic: "webhooks.dlq", Partition: 1, Offset: 7}, deadletter.ReasonRetriesExhausted
	a3.AttemptID, a3.Attempt, a3.Tier, a3.StartedAt, a3.Duration = "att_3", 1, "webhooks.deliveries", now.Add(time.Minute), 15*time.Millisecond
	a3.StatusCode, a3.Outcome, a3.NextAction, a3.ReplayID = 200, attempt.OutcomeDelivered, attempt.NextDone, "rpl_x"
	_, err := st.WriteAttempts(ctx, store.WriteAttemptsParams{Records: []*attempt.Record{&a1, &a2, &a3}, Now: now})
	require.NoError(t, err)

	code, out, errOut := hookctl(t, db, "deliveries", "list", "--endpoint", "ep_a")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "evt_1")
	require.Contains(t, out, "delivered")

	for _, id := range []string{dlv, "evt_1"} {
		code, out, errOut = hookctl(t, db, "deliveries", "show", id)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "upstream down")
		require.Contains(t, out, "webhooks.retry.1s")
		require.Contains(t, out, "dead_letter")
		require.Contains(t, out, "rpl_x")
		require.Contains(t, out, "120ms")
	}
	code, out, _ = hookctl(t, db, "deliveries", "show", "evt_1", "-o", "json")
	require.Equal(t, 0, code)
	var tl []struct {
		Status   string
		Attempts []struct {
			Attempt    int
			StatusCode int    `json:"status_code"`
			ReplayID   string `json:"replay_id"`
		} `json:"attempts_log"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &tl))
	require.Len(t, tl, 1)
	require.Equal(t, "delivered", tl[0].Status)
	require.Len(t, tl[0].Attempts, 3)
	require.Equal(t, "rpl_x", tl[0].Attempts[2].ReplayID)
}

// kill -9 a real hookctl mid-replay, run the same command again: every
// dead letter is replayed exactly once.
func TestReplayKill9ThenResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.endpoint(t, "ep_a", "acct_a", false)
	ids := e.deadLetters(t, "ep_a", "acct_a", "invoice.paid", 300)
	bin := proctest.Binary(t, "hookctl")
	args := append(e.args(), "dlq", "replay", "--reason", "kill test", "--actor", "ci", "--rate", "100")
	p := proctest.Start(t, bin, nil, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		rs, err := e.db.Store.ListReplays(ctx, store.ListReplaysParams{})
		require.NoError(t, err)
		if len(rs) == 1 && rs[0].Replayed >= 50 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replay made no progress; stderr: %s", p.Stderr())
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
	p.Kill()
	partial := e.replayedEvents(t)
	require.Greater(t, len(partial), 0)
	require.Less(t, len(partial), 300, "killed before the end")

	code, out, errOut := proctest.Run(t, 60*time.Second, bin, nil, append(e.args(), "dlq", "replay", "--reason", "kill test", "--actor", "ci")...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "300 replayed")
	got := e.replayedEvents(t)
	require.Len(t, got, 300)
	for _, id := range ids {
		require.Equal(t, 1, got[id], "replayed %d times: %s", got[id], id)
	}
}

// Ctrl-C (SIGINT) mid-replay: hookctl saves what the broker acknowledged,
// marks the request interrupted, says how to resume and exits 1; the same
// command then finishes it without repeats.
func TestReplayInterruptThenResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.endpoint(t, "ep_a", "acct_a", false)
	ids := e.deadLetters(t, "ep_a", "acct_a", "invoice.paid", 100)
	bin := proctest.Binary(t, "hookctl")
	args := append(e.args(), "dlq", "replay", "--reason", "sigint test", "--actor", "ci")
	p := proctest.Start(t, bin, nil, append(args, "--rate", "40")...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		rs, err := e.db.Store.ListReplays(ctx, store.ListReplaysParams{})
		require.NoError(t, err)
		if len(rs) == 1 && rs[0].Replayed >= 40 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replay made no progress; stderr: %s", p.Stderr())
		case <-time.After(20 * time.Millisecond): // polling interval
		}
	}
	p.Signal(syscall.SIGINT)
	require.Equal(t, 1, p.Wait(20*time.Second))
	require.Contains(t, p.Stderr(), "interrupted")
	require.Contains(t, p.Stderr(), "--replay-id rpl_")
	rs, err := e.db.Store.ListReplays(ctx, store.ListReplaysParams{})
	require.NoError(t, err)
	require.Equal(t, store.ReplayInterrupted, rs[0].Status)
	require.Less(t, rs[0].Replayed, int64(100))

	code, out, errOut := proctest.Run(t, 60*time.Second, bin, nil, args...)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "100 replayed")
	got := e.replayedEvents(t)
	require.Len(t, got, 100)
	for _, id := range ids {
		require.Equal(t, 1, got[id], id)
	}
}
