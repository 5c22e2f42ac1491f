package embedded_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/proctest"
)

// A transaction left open by a broker's kill -9 must not hide the same
// producer's later transactions from read_committed readers. kfake, restarted
// from its data directory, counts the open transaction as aborted but writes
// no abort marker, and a read_committed client drops every later batch of that
// producer id in a fetch that also holds the aborted one, waiting for a marker
// that never comes: committed records are skipped, and their consumers commit
// past them (deliveries lost in TestChaosBrokerDown120s).
func TestCrashAbortedTransactionHidesNothingAfterIt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newCrashBroker(ctx, t)

	open := b.txnClient(t)
	require.NoError(t, open.BeginTransaction())
	require.NoError(t, open.ProduceSync(ctx, kgo.StringRecord("open at the crash")).FirstErr())
	b.kill()
	open.Close()

	restarted := b.start()
	next := b.txnClient(t) // the same transactional id: the same producer id
	defer next.Close()
	require.NoError(t, next.BeginTransaction())
	for _, v := range []string{"committed 1", "committed 2"} {
		require.NoError(t, next.ProduceSync(ctx, kgo.StringRecord(v)).FirstErr())
	}
	require.NoError(t, next.EndTransaction(ctx, kgo.TryCommit))

	require.Equal(t, []string{"committed 1", "committed 2"}, b.readCommitted(ctx, t, 2, 10*time.Second),
		"read_committed must return the transaction committed after the crash, and nothing of the one open at it")
	require.Contains(t, restarted.Stderr(), "closed the transactions a crash left open")
}

// A producer that asks to commit a transaction the broker's kill aborted is
// told it failed (kfake answers INVALID_TXN_STATE), so a router rewinds to its
// committed offsets and fans the events out again; told it committed, it
// would move on past events it never fanned out. kfake's behaviour, checked
// here because the router relies on it.
func TestCommitAfterACrashIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	b := newCrashBroker(ctx, t)

	open := b.txnClient(t)
	defer open.Close()
	require.NoError(t, open.BeginTransaction())
	require.NoError(t, open.ProduceSync(ctx, kgo.StringRecord("before")).FirstErr())
	require.NoError(t, open.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, open.BeginTransaction())
	require.NoError(t, open.ProduceSync(ctx, kgo.StringRecord("open at the crash")).FirstErr())
	b.kill()
	b.start()
	endErr := open.EndTransaction(ctx, kgo.TryCommit)

	// Read until the deadline: a record that should not be there may come late.
	require.Equal(t, []string{"before"}, b.readCommitted(ctx, t, 3, 5*time.Second), "read_committed after the crash")
	require.Error(t, endErr, "the commit was reported although the crash aborted its records")
}

// crashBroker is a real hookd broker process on a data directory that
// outlives it, with a one-partition topic "t".
type crashBroker struct {
	t        *testing.T
	bin, dir string
	kafka    string
	proc     *proctest.Proc
}

func newCrashBroker(ctx context.Context, t *testing.T) *crashBroker {
	b := &crashBroker{t: t, bin: proctest.Binary(t, "hookd"), dir: t.TempDir(),
		kafka: "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))}
	b.start()
	admin, err := kgo.NewClient(kgo.SeedBrokers(b.kafka))
	require.NoError(t, err)
	defer admin.Close()
	_, err = kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "t")
	require.NoError(t, err)
	return b
}

func (b *crashBroker) start() *proctest.Proc {
	b.t.Helper()
	b.proc = proctest.Start(b.t, b.bin, nil, "broker", "--data-dir", b.dir, "--kafka-listen", b.kafka)
	b.proc.WaitListening(b.kafka, 60*time.Second)
	return b.proc
}

func (b *crashBroker) kill() { b.proc.Kill() }

// txnClient produces to "t" as the transactional id every client here shares.
func (b *crashBroker) txnClient(t *testing.T) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.kafka), kgo.TransactionalID("crash-test"),
		kgo.RecordRetries(10), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	return cl
}

// readCommitted reads "t" from its start, read_committed, until it has want
// records or within has passed.
func (b *crashBroker) readCommitted(ctx context.Context, t *testing.T, want int, within time.Duration) []string {
	reader, err := kgo.NewClient(kgo.SeedBrokers(b.kafka), kgo.ConsumeTopics("t"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	var got []string
	poll, stop := context.WithTimeout(ctx, within)
	defer stop()
	for len(got) < want && poll.Err() == nil {
		reader.PollFetches(poll).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}
