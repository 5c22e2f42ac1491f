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
	bin := proctest.Binary(t, "hookd")
	dir := t.TempDir()
	kafka := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	broker := startBroker(t, bin, dir, kafka)

	admin, err := kgo.NewClient(kgo.SeedBrokers(kafka))
	require.NoError(t, err)
	defer admin.Close()
	_, err = kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "t")
	require.NoError(t, err)

	open := txnClient(t, kafka)
	require.NoError(t, open.BeginTransaction())
	require.NoError(t, open.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("open at the crash")}).FirstErr())
	broker.Kill()
	open.Close()

	restarted := startBroker(t, bin, dir, kafka)
	next := txnClient(t, kafka) // the same transactional id: the same producer id
	defer next.Close()
	require.NoError(t, next.BeginTransaction())
	for _, v := range []string{"committed 1", "committed 2"} {
		require.NoError(t, next.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(v)}).FirstErr())
	}
	require.NoError(t, next.EndTransaction(ctx, kgo.TryCommit))

	reader, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ConsumeTopics("t"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	var got []string
	poll, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	for len(got) < 2 && poll.Err() == nil {
		reader.PollFetches(poll).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Equal(t, []string{"committed 1", "committed 2"}, got,
		"read_committed must return the transaction committed after the crash, and nothing of the one open at it")
	require.Contains(t, restarted.Stderr(), "closed the transactions a crash left open")
}

func startBroker(t *testing.T, bin, dir, kafka string) *proctest.Proc {
	t.Helper()
	p := proctest.Start(t, bin, nil, "broker", "--data-dir", dir, "--kafka-listen", kafka)
	p.WaitListening(kafka, 60*time.Second)
	return p
}

func txnClient(t *testing.T, kafka string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.TransactionalID("crash-test"),
		kgo.RecordRetries(10), kgo.DefaultProduceTopic("t"))
	require.NoError(t, err)
	return cl
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
	bin := proctest.Binary(t, "hookd")
	dir := t.TempDir()
	kafka := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	broker := startBroker(t, bin, dir, kafka)
	admin, err := kgo.NewClient(kgo.SeedBrokers(kafka))
	require.NoError(t, err)
	defer admin.Close()
	_, err = kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "t")
	require.NoError(t, err)

	open := txnClient(t, kafka)
	defer open.Close()
	require.NoError(t, open.BeginTransaction())
	require.NoError(t, open.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("before")}).FirstErr())
	require.NoError(t, open.EndTransaction(ctx, kgo.TryCommit))
	require.NoError(t, open.BeginTransaction())
	require.NoError(t, open.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("open at the crash")}).FirstErr())
	broker.Kill()
	startBroker(t, bin, dir, kafka)
	endErr := open.EndTransaction(ctx, kgo.TryCommit)

	reader, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.ConsumeTopics("t"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	var got []string
	poll, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	for poll.Err() == nil {
		reader.PollFetches(poll).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	require.Equal(t, []string{"before"}, got, "read_committed after the crash")
	require.Error(t, endErr, "the commit was reported although the crash aborted its records")
}
