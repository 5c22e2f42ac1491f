package kafkaconn

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

func testQuietInfo(h slog.Handler) quietInfo {
	return quietInfo{Handler: h, seen: &repeats{last: map[string]time.Time{}}}
}

// The Kafka client's info lines are logged at debug, its warnings at warn:
// at the default level an operator sees hookd's lines, not the client's.
func TestKafkaClientInfoIsDebug(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := kslog.New(slog.New(testQuietInfo(logger.Handler())))
	l.Log(kgo.LogLevelInfo, "metadata update", "broker", 1)
	l.Log(kgo.LogLevelWarn, "unable to dial", "broker", 1)
	out := buf.String()
	if strings.Contains(out, "metadata update") {
		t.Fatalf("client info logged at the default level: %q", out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "unable to dial") {
		t.Fatalf("client warning missing or demoted: %q", out)
	}
	buf.Reset()
	debug := slog.New(testQuietInfo(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	kslog.New(debug).Log(kgo.LogLevelInfo, "metadata update")
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Fatalf("client info missing at --log-level debug: %q", buf.String())
	}
}

// During an outage the client retries every second; each warning is logged
// once at its level, its repeats at debug, until it has been quiet for
// repeatQuiet (the next outage logs it again).
func TestKafkaClientWarningsAreLoggedOncePerOutage(t *testing.T) {
	var buf bytes.Buffer
	q := testQuietInfo(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := kslog.New(slog.New(q))
	for range 100 {
		l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "broker", 1)
		l.Log(kgo.LogLevelError, "group manage loop errored", "err", "dial refused")
	}
	if n := strings.Count(buf.String(), "unable to open connection"); n != 1 {
		t.Fatalf("warning logged %d times in one outage, want once:\n%s", n, buf.String())
	}
	if n := strings.Count(buf.String(), "level=ERROR"); n != 1 {
		t.Fatalf("error logged %d times in one outage, want once:\n%s", n, buf.String())
	}
	// The next outage, after a quiet minute, is logged again.
	q.seen.mu.Lock()
	for msg, at := range q.seen.last {
		q.seen.last[msg] = at.Add(-repeatQuiet - time.Second)
	}
	q.seen.mu.Unlock()
	l.Log(kgo.LogLevelWarn, "unable to open connection to broker", "broker", 1)
	if n := strings.Count(buf.String(), "unable to open connection"); n != 2 {
		t.Fatalf("warning of a later outage logged %d times in all, want 2", n)
	}
	// At --log-level debug every retry is still there.
	buf.Reset()
	dq := testQuietInfo(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	dl := kslog.New(slog.New(dq))
	for range 3 {
		dl.Log(kgo.LogLevelWarn, "unable to open connection to broker")
	}
	if n := strings.Count(buf.String(), "unable to open connection"); n != 3 {
		t.Fatalf("at debug: %d lines, want every retry (3)", n)
	}
}

func TestRetryBackoffIsCappedAtOneSecond(t *testing.T) {
	for fails := range 30 {
		d := retryBackoff(fails)
		if d < 200*time.Millisecond || d > 1200*time.Millisecond {
			t.Fatalf("retryBackoff(%d) = %s, want 200ms..1.2s", fails, d)
		}
	}
}
