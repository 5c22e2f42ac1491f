package dispatcher

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/retrytiers"
)

// revokeSpy is a kgo logger that closes entered when kgo enters the
// revoke callback with partitions.
type revokeSpy struct {
	once    sync.Once
	entered chan struct{}
}

func (*revokeSpy) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (s *revokeSpy) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	if msg == "entering OnPartitionsRevoked" && strings.Contains(fmt.Sprint(keyvals...), "webhooks.deliveries") {
		s.once.Do(func() { close(s.entered) })
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type noEndpoints struct{}

func (noEndpoints) Endpoint(string) (Target, bool) { return Target{}, false }

// Group management starts inside kgo.NewClient: a rebalance can revoke
// the partitions just assigned before NewClient has returned to Run. The
// test holds NewClient's return until kgo has entered the revoke callback
// (the first heartbeat answers REBALANCE_IN_PROGRESS), the widest form of
// that window. The callback must neither see the gate, pauses or work
// context unset (a nil dereference, or a data race under -race) nor
// deadlock; the dispatcher then rejoins and runs on. Fails when the
// state is built after the client and the callbacks do not wait for it.
func TestRebalanceBeforeTheClientReturns(t *testing.T) {
	s, err := retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	require.NoError(t, err)
	tcfg := topics.Config{Prefix: "webhooks", Partitions: 2, Schedule: s}
	c := kafkatest.NewProvisioned(t, tcfg)
	c.ControlKey(int16(kmsg.Heartbeat), func(r kmsg.Request) (kmsg.Response, error, bool) {
		resp := r.(*kmsg.HeartbeatRequest).ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true // once: the control is dropped after it
	})
	spy := &revokeSpy{entered: make(chan struct{})}
	logs := &syncBuffer{}
	d, err := New(Config{Group: "g-early-revoke", Topics: tcfg}, Deps{
		Endpoints: noEndpoints{},
		Logger:    slog.New(slog.NewTextHandler(logs, nil)),
		KafkaOpts: []kgo.Opt{kgo.SeedBrokers(c.Addrs...), kgo.HeartbeatInterval(100 * time.Millisecond), kgo.WithLogger(spy)},
	})
	require.NoError(t, err)
	d.newClient = func(opts ...kgo.Opt) (*kgo.Client, error) {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		select {
		case <-spy.entered:
		case <-time.After(30 * time.Second):
			t.Error("no revoke within 30s")
		}
		return cl, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	wait.For(t, 30*time.Second, "revoked, then assigned again", func() bool {
		l := logs.String()
		i := strings.Index(l, "partitions released")
		return i >= 0 && strings.Contains(l[i:], "partitions assigned")
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
}
