//go:build linux

package embedded

import (
	"context"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/wait"
)

// roundTrip produces one record to topic with a new client and reads it
// back: the broker accepts new connections and serves them.
func roundTrip(t *testing.T, b *Broker, topic, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	_, _ = kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic)
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr())
	for {
		fs := cl.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "record %q not read back", value)
		for _, r := range fs.Records() {
			if string(r.Value) == value {
				return
			}
		}
	}
}

// The finding: with the process out of file descriptors, kfake's
// accept loop returned on EMFILE and the broker's port refused every
// connection until a restart. Now the broker reports why it does not
// accept (Err, for /readyz) and serves new clients once descriptors are
// free. Not parallel: it lowers the test process's own open-file limit.
func TestBrokerSurvivesTooManyOpenFiles(t *testing.T) {
	b := start(t, t.TempDir())
	defer b.Close()
	roundTrip(t, b, "before", "1")

	var orig syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig))
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	low := orig
	low.Cur = uint64(len(fds) + 64)
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))
	restore := func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) }
	defer restore()

	// Take every descriptor, then free one for a client socket: the
	// kernel completes its handshake, and the broker's accept fails.
	var held []*os.File
	release := func() {
		for _, f := range held {
			f.Close()
		}
		held = nil
	}
	defer release()
	// exhaust takes every free descriptor; a dial then takes the one freed
	// before it, so the kernel completes the handshake and the broker's
	// accept fails. The broker frees descriptors of its own now and then
	// (its data directory's files), which can let one accept through, so
	// the step repeats until an accept failed.
	exhaust := func() {
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				require.ErrorIs(t, err, syscall.EMFILE)
				return
			}
			held = append(held, f)
		}
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Err says so while accepts fail; it may be nil again between two
	// polls, so the failure itself is read from the acceptor's count.
	var failure error
	wait.For(t, 20*time.Second, "the broker to meet the accept error", func() bool {
		b.acc.mu.Lock()
		n := b.acc.failures
		failure = b.acc.lastFailure
		b.acc.mu.Unlock()
		if n > 0 {
			return true
		}
		exhaust()
		if len(held) > 0 {
			held[len(held)-1].Close()
			held = held[:len(held)-1]
		}
		if c, err := net.DialTimeout("tcp", b.Addrs()[0], time.Second); err == nil {
			conns = append(conns, c)
		}
		return false
	})
	require.ErrorIs(t, failure, syscall.EMFILE)
	t.Logf("accept error while out of descriptors: %v (Err: %v)", failure, b.Err())

	release()
	restore()
	wait.For(t, 10*time.Second, "the broker to accept again", func() bool { return b.Err() == nil })
	roundTrip(t, b, "after", "2")
}

// A listener that breaks for good (here closed under the broker) is bound
// afresh on the same address, instead of leaving the port refusing.
func TestBrokerListensAgainWhenItsListenerBreaks(t *testing.T) {
	t.Parallel()
	b := start(t, t.TempDir())
	defer b.Close()
	roundTrip(t, b, "before", "1")
	b.acc.mu.Lock()
	inner := b.acc.ln
	b.acc.mu.Unlock()
	require.NoError(t, inner.Close())
	wait.For(t, 10*time.Second, "a new listener", func() bool {
		b.acc.mu.Lock()
		defer b.acc.mu.Unlock()
		return b.acc.ln != inner
	})
	roundTrip(t, b, "after", "2")
	require.NoError(t, b.Err())
}
