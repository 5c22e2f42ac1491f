package embedded

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: Close
// must stop everything the broker started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func start(t *testing.T, dir string) *Broker {
	t.Helper()
	b, err := Start(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return b
}

// A record acknowledged before Close is served after a restart on the same
// data directory, and Close leaves no goroutine running (TestMain).
func TestRestartServesAcknowledgedRecords(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()

	b := start(t, dir)
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	require.NoError(t, err)
	_, err = kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, "t")
	require.NoError(t, err)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("kept")}).FirstErr())
	cl.Close()
	b.Close()

	b = start(t, dir)
	defer b.Close()
	cl, err = kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics("t"))
	require.NoError(t, err)
	defer cl.Close()
	fs := cl.PollFetches(ctx)
	require.NoError(t, fs.Err())
	recs := fs.Records()
	require.Len(t, recs, 1)
	require.Equal(t, "kept", string(recs[0].Value))
}

// A second broker on a data directory in use is refused, and the refusal
// leaves nothing running.
func TestDataDirInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := start(t, dir)
	defer b.Close()
	_, err := Start(context.Background(), Config{DataDir: dir, Listen: "127.0.0.1:0"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.ErrorIs(t, err, ErrDataDirInUse)
}

// A data directory whose broker was closed is not repaired at the next
// start; one whose broker was killed (no clean-stop mark) is, and so is one
// whose last start was itself killed.
func TestCrashedTellsAKillFromAClose(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	crash, err := crashed(dir)
	require.NoError(t, err)
	require.False(t, crash, "a new data directory")

	b := start(t, dir)
	b.Close()
	crash, err = crashed(dir)
	require.NoError(t, err)
	require.False(t, crash, "closed")
	crash, err = crashed(dir)
	require.NoError(t, err)
	require.True(t, crash, "started, then killed before Close")
}
