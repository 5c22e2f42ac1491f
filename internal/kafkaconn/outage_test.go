package kafkaconn_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/internal/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuffer is a goroutine-safe log sink.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) count(substr string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), substr)
}

// faultyCluster is a kfake broker that stops answering while down is set:
// it closes every connection (closed) or reads requests and never answers
// them (frozen, as a SIGSTOPped broker would).
type faultyCluster struct {
	*kfake.Cluster
	down atomic.Bool
}

func newFaultyCluster(t *testing.T, frozen bool) *faultyCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	f := &faultyCluster{Cluster: c}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !f.down.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		if frozen {
			return nil, nil, true
		}
		return nil, errors.New("injected outage"), true
	})
	return f
}

type monitorBundle struct {
	mon  *kafkaconn.Monitor
	reg  *prometheus.Registry
	logs *logBuffer
	stop func()
}

func startMonitor(t *testing.T, addrs []string) *monitorBundle {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }))
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	b := &monitorBundle{reg: prometheus.NewRegistry(), logs: &logBuffer{}}
	b.mon, err = kafkaconn.NewMonitor(kafkaconn.MonitorConfig{Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond},
		kafkaconn.MonitorDeps{Client: cl, Logger: slog.New(slog.NewTextHandler(b.logs, nil)), Registerer: b.reg})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.mon.Run(ctx) }()
	b.stop = func() {
		cancel()
		require.NoError(t, <-done)
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			b.stop()
		}
	})
	return b
}

// Stopping the monitor during an outage does not report Kafka back.
func TestMonitorStoppingEndsNoOutage(t *testing.T) {
	t.Parallel()
	c := newFaultyCluster(t, true) // frozen: the monitor spends its time in probes
	b := startMonitor(t, c.ListenAddrs())
	c.down.Store(true)
	wait.For(t, 10*time.Second, "kafka unreachable", func() bool { return b.mon.Err() != nil })
	b.stop()
	require.Zero(t, b.logs.count("kafka reachable again"))
	require.Error(t, b.mon.Err())
}

var unreachable = regexp.MustCompile(`^unreachable since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(\d+s\): .+`)

// One outage, however many probes fail in it, is one WARN, one INFO, one
// count; readiness reads the state with its reason at once.
func TestMonitorReportsOneOutageWithItsReason(t *testing.T) {
	for _, frozen := range []bool{false, true} {
		name := map[bool]string{false: "closed", true: "frozen"}[frozen]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newFaultyCluster(t, frozen)
			b := startMonitor(t, c.ListenAddrs())
			wait.For(t, 10*time.Second, "a first probe", func() bool { return b.mon.Err() == nil })
			require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_kafka_reachable"))

			c.down.Store(true)
			wait.For(t, 10*time.Second, "kafka unreachable", func() bool { return b.mon.Err() != nil })
			var ue *kafkaconn.UnreachableError
			require.ErrorAs(t, b.mon.Err(), &ue)
			require.Regexp(t, unreachable, b.mon.Err().Error())
			if frozen {
				require.ErrorContains(t, b.mon.Err(), "no answer within 200ms")
			}
			require.Equal(t, 0.0, metrictest.Value(t, b.reg, "hookd_kafka_reachable"))
			// Many probes fail in this outage.
			wait.For(t, 10*time.Second, "a second of outage", func() bool { return ue.Since.Before(time.Now().Add(-time.Second)) })
			require.Equal(t, 1, b.logs.count("kafka unreachable"), "one WARN per outage")
			require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_kafka_outages_total"))
			require.Greater(t, metrictest.Value(t, b.reg, "hookd_kafka_outage_seconds_total"), 0.9)

			c.down.Store(false)
			wait.For(t, 10*time.Second, "kafka reachable", func() bool { return b.mon.Err() == nil })
			require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_kafka_reachable"))
			require.Equal(t, 1, b.logs.count("kafka reachable again"))
			require.Equal(t, 1.0, metrictest.Value(t, b.reg, "hookd_kafka_outages_total"))
			secs := metrictest.Value(t, b.reg, "hookd_kafka_outage_seconds_total")
			require.Greater(t, secs, 0.9)
			require.Equal(t, 1, b.logs.count("kafka unreachable"))
		})
	}
}

func TestPermanentErrors(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		kerr.TopicAuthorizationFailed:                      true,
		kerr.GroupAuthorizationFailed:                      true,
		kerr.SaslAuthenticationFailed:                      true,
		kerr.UnknownTopicOrPartition:                       true,
		kerr.NotLeaderForPartition:                         false,
		kerr.RequestTimedOut:                               false,
		kerr.CoordinatorNotAvailable:                       false,
		kerr.RebalanceInProgress:                           false,
		context.DeadlineExceeded:                           false,
		errors.New("dial tcp: connection refused"):         false,
		errors.Join(errors.New("x"), kerr.MessageTooLarge): true,
	} {
		require.Equal(t, want, kafkaconn.Permanent(err), "%v", err)
	}
}

// A stopped broker's reason names the refused connection, not only the
// silence.
func TestMonitorNamesTheConnectionError(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	require.NoError(t, err)
	dials := &kafkaconn.DialErrors{}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithHooks(dials))
	require.NoError(t, err)
	defer cl.Close()
	// The default 1s timeout: kgo retries the dial within it, so the
	// probe itself ends with the deadline, not the dial's error.
	mon, err := kafkaconn.NewMonitor(kafkaconn.MonitorConfig{},
		kafkaconn.MonitorDeps{Client: cl, Dials: dials, Logger: discard})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mon.Run(ctx) }()
	defer func() { cancel(); require.NoError(t, <-done) }()
	wait.For(t, 10*time.Second, "a first probe", func() bool { return mon.Err() == nil })
	c.Close()
	// kgo answers some probes with the dial error and lets others run
	// into the deadline while it retries the dial: every reason names the
	// refused connection either way.
	reasons := map[bool]string{}
	wait.For(t, 20*time.Second, "three seconds of outage", func() bool {
		var ue *kafkaconn.UnreachableError
		if !errors.As(mon.Err(), &ue) {
			return false
		}
		require.ErrorContains(t, ue, "connection refused")
		reasons[strings.Contains(ue.Error(), "no answer within")] = ue.Error()
		return ue.For >= 3*time.Second
	})
	t.Logf("reasons seen: %v", reasons)
}
