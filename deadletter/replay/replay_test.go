package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
)

type bundle struct {
	deps    Deps
	cluster *kafkatest.Cluster
	cl      *kgo.Client
	db      *pgtest.DB
}

func setup(t *testing.T) *bundle {
	t.Helper()
	cfg := topics.Config{Partitions: 4}
	cfg.SetDefaults()
	c := kafkatest.NewProvisioned(t, cfg)
	db := pgtest.New(t)
	return &bundle{
		deps: Deps{Store: db.Store, KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Addrs...)}, Names: topics.NamesFor(cfg),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		cluster: c, cl: c.Client(t), db: db,
	}
}

func (b *bundle) endpoint(t *testing.T, id, account string, status endpoint.Status) {
	t.Helper()
	e := endpoint.Endpoint{ID: id, Account: account, URL: "https://example.com/" + id, Secrets: []string{endpoint.NewSecret()}, Status: status}
	if status == endpoint.StatusDisabled {
		e.DisabledReason = "test"
	}
	_, err := b.db.Store.CreateEndpoint(context.Background(), e)
	require.NoError(t, err)
}

// deadLetters produces n dead letters for endpoint ep (as the dispatcher
// would: on the endpoint's partition), event ids "<ep>-evt-<i>".
func (b *bundle) deadLetters(t *testing.T, ep, account, eventType, reason string, n int) {
	t.Helper()
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(context.Background(), b.deadLetterRecords(t, ep, account, eventType, reason, n)...).FirstErr())
}

// deadLetterRecords are the records deadLetters produces.
func (b *bundle) deadLetterRecords(t *testing.T, ep, account, eventType, reason string, n int) []*kgo.Record {
	t.Helper()
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		evt := fmt.Sprintf("%s-evt-%d", ep, i)
		body, err := delivery.Body(evt, eventType, time.Now(), []byte(`{"i":1}`))
		require.NoError(t, err)
		d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: eventType, EndpointID: ep, Account: account,
			EventCreated: time.Now(), Attempt: 5, FirstAttempt: time.Now(), LastStatus: 503, LastError: "http_5xx", Body: body}
		src := d.Record(b.deps.Names.Retry[0])
		src.Partition = partitionOf(ep, 4)
		recs = append(recs, deadletter.Record(b.deps.Names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic,
			Attempts: 5, LastStatus: 503, ErrorClass: "http_5xx", Reason: reason, DeadAt: time.Now()}))
	}
	return recs
}

// replayed reads the deliveries topic and returns the records carrying a
// replay id, by event id.
func (b *bundle) replayed(t *testing.T) map[string][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(b.cl).ListEndOffsets(ctx, b.deps.Names.Deliveries)
	require.NoError(t, err)
	ranges := map[int32]Range{}
	ends.Each(func(o kadm.ListedOffset) { ranges[o.Partition] = Range{From: 0, To: o.Offset} })
	out := map[string][]*kgo.Record{}
	require.NoError(t, readRanges(ctx, b.deps.KafkaOpts, b.deps.Names.Deliveries, ranges, func(recs []*kgo.Record) error {
		for _, r := range recs {
			d, err := delivery.Decode(r)
			require.NoError(t, err)
			if d.ReplayID != "" {
				out[d.EventID] = append(out[d.EventID], r)
			}
		}
		return nil
	}))
	return out
}

func TestScanFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.deadLetters(t, "ep_a", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 5)
	b.deadLetters(t, "ep_b", "acct_b", "customer.created", deadletter.ReasonEndpointGone, 3)
	ctx := context.Background()
	count := func(f Filter) int64 {
		st, err := Scan(ctx, b.deps, f, func(Entry) error { return nil })
		require.NoError(t, err)
		return st.Matched
	}
	require.EqualValues(t, 8, count(Filter{}))
	require.EqualValues(t, 5, count(Filter{EndpointID: "ep_a"}))
	require.EqualValues(t, 3, count(Filter{Account: "acct_b"}))
	require.EqualValues(t, 5, count(Filter{EventType: "invoice.*"}))
	require.EqualValues(t, 3, count(Filter{Reason: deadletter.ReasonEndpointGone}))
	require.EqualValues(t, 0, count(Filter{Since: time.Now().Add(time.Hour)}))
	require.EqualValues(t, 8, count(Filter{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Minute)}))
	require.EqualValues(t, 0, count(Filter{Until: time.Now().Add(-time.Hour)}))

	var e Entry
	_, err := Scan(ctx, b.deps, Filter{EndpointID: "ep_b"}, func(got Entry) error { e = got; return errStop })
	require.NoError(t, err)
	require.Equal(t, "acct_b", e.Account)
	require.Equal(t, deadletter.ReasonEndpointGone, e.Reason)
	require.Equal(t, 5, e.Attempts)
	require.Equal(t, 503, e.LastStatus)
	require.Empty(t, e.Unreplayable)
}

// Dead letters written in Kafka transactions, as the router writes those of
// invalid envelopes, are read once committed and never when aborted, and
// a scan ends although the partitions' last offsets are transaction
// markers, which a reader never gets as records.
func TestScanReadsTransactionalDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cl := b.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("router"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tx := range []struct {
		ep  string
		end kgo.TransactionEndTry
	}{{"ep_a", kgo.TryCommit}, {"ep_b", kgo.TryAbort}, {"ep_c", kgo.TryCommit}} {
		require.NoError(t, cl.BeginTransaction())
		require.NoError(t, cl.ProduceSync(ctx, b.deadLetterRecords(t, tx.ep, "acct_a", "invoice.paid", deadletter.ReasonInvalidEnvelope, 3)...).FirstErr())
		require.NoError(t, cl.EndTransaction(ctx, tx.end))
	}
	seen := map[string]int{}
	_, err := Scan(ctx, b.deps, Filter{}, func(e Entry) error { seen[e.EndpointID]++; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]int{"ep_a": 3, "ep_c": 3}, seen)
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"24h":                  now.Add(-24 * time.Hour),
		"90m":                  now.Add(-90 * time.Minute),
		"7d":                   now.Add(-7 * 24 * time.Hour),
		"2026-05-01T10:00:00Z": time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC),
	} {
		got, err := ParseTime(in, now)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), in)
	}
	for _, bad := range []string{"yesterday", "-5h", "2026-05-01"} {
		_, err := ParseTime(bad, now)
		require.Error(t, err, bad)
	}
}

func TestReplayOnceWithAudit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.endpoint(t, "ep_off", "acct_a", endpoint.StatusDisabled)
	b.deadLetters(t, "ep_a", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 7)
	b.deadLetters(t, "ep_off", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 2)
	b.deadLetters(t, "ep_gone", "acct_a", "invoice.paid", deadletter.ReasonEndpointDeleted, 1)

	req := Request{Actor: "alice", Reason: "outage INC-1", Filter: Filter{Account: "acct_a"}}
	dry := req
	dry.DryRun = true
	res, err := Run(ctx, b.deps, dry)
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Matched)
	require.EqualValues(t, 7, res.Replayed, "would replay")
	require.EqualValues(t, 3, res.Skipped)
	require.True(t, res.DryRun)
	require.Empty(t, b.replayed(t), "a dry run produces nothing")

	res, err = Run(ctx, b.deps, req)
	require.NoError(t, err)
	require.Equal(t, req.DerivedID(), res.ID)
	require.Equal(t, store.ReplayDone, res.Status)
	require.EqualValues(t, 10, res.Matched)
	require.EqualValues(t, 7, res.Replayed)
	require.EqualValues(t, 3, res.Skipped)
	require.Contains(t, res.SkippedEndpoints["ep_off"], "disabled")
	require.Contains(t, res.SkippedEndpoints["ep_gone"], "deleted")

	got := b.replayed(t)
	require.Len(t, got, 7)
	for evt, recs := range got {
		require.Len(t, recs, 1, evt)
		d, err := delivery.Decode(recs[0])
		require.NoError(t, err)
		require.Equal(t, res.ID, d.ReplayID)
		require.Equal(t, 1, d.Attempt)
		require.Zero(t, d.LastStatus)
		require.True(t, d.FirstAttempt.IsZero())
		require.Equal(t, delivery.ID(evt, "ep_a"), d.ID)
		require.Equal(t, partitionOf("ep_a", 4), recs[0].Partition, "the endpoint's partition, as the router hashes it")
	}

	audit, err := b.db.Store.GetReplay(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, "alice", audit.Actor)
	require.Equal(t, "outage INC-1", audit.Reason)
	require.Contains(t, string(audit.Filter), `"account": "acct_a"`)
	require.NotNil(t, audit.FinishedAt)

	// The same request again: already done, nothing produced.
	res, err = Run(ctx, b.deps, req)
	require.NoError(t, err)
	require.True(t, res.AlreadyDone)
	require.Len(t, b.replayed(t), 7)

	// A disabled endpoint named in the filter is refused without --force.
	_, err = Run(ctx, b.deps, Request{Actor: "alice", Reason: "x", Filter: Filter{EndpointID: "ep_off"}})
	require.ErrorIs(t, err, ErrEndpointDisabled)
	res, err = Run(ctx, b.deps, Request{Actor: "alice", Reason: "x", Filter: Filter{EndpointID: "ep_off"}, Force: true})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Replayed)

	_, err = Run(ctx, b.deps, Request{Actor: "alice", Filter: Filter{}})
	require.ErrorIs(t, err, ErrInvalid)
}

func TestReplayLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.deadLetters(t, "ep_a", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 10)
	res, err := Run(ctx, b.deps, Request{Actor: "a", Reason: "r", Limit: 4, chunk: 3})
	require.NoError(t, err)
	require.EqualValues(t, 4, res.Replayed)
	require.Equal(t, store.ReplayDone, res.Status)
	require.Len(t, b.replayed(t), 4)
}

// An interrupted run (context cancelled between chunks, or a crash after
// the broker acknowledged a chunk but before its progress was saved),
// then the same request again: every dead letter replayed exactly once.
func TestReplayResumesWithoutRepeats(t *testing.T) {
	t.Parallel()
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash_after_ack=%v", crash), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			for _, ep := range []string{"ep_a", "ep_b", "ep_c"} {
				b.endpoint(t, ep, "acct_a", endpoint.StatusActive)
				b.deadLetters(t, ep, "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 40)
			}
			req := Request{Actor: "a", Reason: "r", chunk: 7}
			runCtx, cancel := context.WithCancel(ctx)
			chunks := 0
			if crash {
				req.afterProduce = func() error {
					if chunks++; chunks == 4 {
						return errors.New("simulated crash after the broker ack")
					}
					return nil
				}
			} else {
				req.OnProgress = func(p Progress) {
					if p.Replayed >= 30 {
						cancel()
					}
				}
			}
			res, err := Run(runCtx, b.deps, req)
			cancel()
			require.Error(t, err)
			require.Less(t, res.Replayed, int64(120))
			if crash {
				require.Equal(t, store.ReplayFailed, res.Status)
			} else {
				require.Equal(t, store.ReplayInterrupted, res.Status)
			}
			first := len(b.replayed(t))
			require.Greater(t, first, 0)
			require.Less(t, first, 120)

			req.afterProduce, req.OnProgress = nil, nil
			res, err = Run(ctx, b.deps, req)
			require.NoError(t, err)
			require.Equal(t, store.ReplayDone, res.Status)
			require.EqualValues(t, 120, res.Replayed)
			got := b.replayed(t)
			require.Len(t, got, 120)
			for evt, recs := range got {
				require.Len(t, recs, 1, "replayed twice: %s", evt)
			}
		})
	}
}

func TestReplayBusy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.endpoint(t, "ep_a", "acct_a", endpoint.StatusActive)
	b.deadLetters(t, "ep_a", "acct_a", "invoice.paid", deadletter.ReasonRetriesExhausted, 1)
	req := Request{Actor: "a", Reason: "r", afterProduce: func() error { return errors.New("crash") }}
	_, err := Run(ctx, b.deps, req)
	require.Error(t, err)
	req.afterProduce = nil

	lock, err := b.db.Store.LockReplay(ctx, "", req.DerivedID())
	require.NoError(t, err)
	_, err = Run(ctx, b.deps, req)
	require.ErrorIs(t, err, store.ErrReplayBusy)
	lock.Unlock()

	res, err := Run(ctx, b.deps, req)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.Replayed)
	require.Len(t, b.replayed(t), 1)

	other := Request{ID: req.DerivedID(), Actor: "mallory", Reason: "r"}
	_, err = Run(ctx, b.deps, other)
	require.ErrorIs(t, err, ErrRequestMismatch)
}
