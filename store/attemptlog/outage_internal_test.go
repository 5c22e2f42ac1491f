package attemptlog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/clock/fakeclock"
)

// testHealth is a kafkaHealth on a fake clock, logging into its buffer.
func testHealth() (*kafkaHealth, *bytes.Buffer, *fakeclock.Clock) {
	buf := &bytes.Buffer{}
	clk := fakeclock.New(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"})
	return newKafkaHealth(slog.New(slog.NewTextHandler(buf, nil)), clk, up), buf, clk
}

// A partition reset the client reports is a WARN of its own when nothing
// else is wrong, and an INFO during an outage or just after it (its likely
// cause); it never starts an outage.
func TestKafkaHealthPartitionResets(t *testing.T) {
	kh, buf, clk := testHealth()
	ctx := context.Background()
	loss := &kgo.ErrDataLoss{Topic: "webhooks.attempts", Partition: 2, ConsumedTo: 47}
	last := func() string {
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		return lines[len(lines)-1]
	}

	kh.reset(ctx, loss)
	if l := last(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "partition=2") {
		t.Fatalf("a reset on a working broker: %s", l)
	}
	if kh.down {
		t.Fatal("a reset started an outage")
	}
	kh.failed(ctx, "fetching", context.DeadlineExceeded)
	kh.reset(ctx, loss)
	if l := last(); !strings.Contains(l, "level=INFO") {
		t.Fatalf("a reset during an outage: %s", l)
	}
	kh.fetched(ctx)
	clk.Advance(resetGrace / 2)
	kh.reset(ctx, loss)
	if l := last(); !strings.Contains(l, "level=INFO") {
		t.Fatalf("a reset just after an outage: %s", l)
	}
	clk.Advance(resetGrace)
	kh.reset(ctx, loss)
	if l := last(); !strings.Contains(l, "level=WARN") {
		t.Fatalf("a reset long after an outage: %s", l)
	}
	if n := strings.Count(buf.String(), "kafka is failing"); n != 1 {
		t.Fatalf("%d outage WARNs, want 1", n)
	}
}

// When only fetches fail, the commits that succeed between their errors do
// not end the outage: it is one WARN and one INFO, however the two
// interleave. A commit ends it once fetches have been quiet for a while.
func TestKafkaHealthFetchOutageOutlivesCommits(t *testing.T) {
	kh, buf, clk := testHealth()
	ctx := context.Background()

	kh.fetchFailed(ctx, "fetching webhooks.attempts/0", errors.New("UNKNOWN_SERVER_ERROR"))
	clk.Advance(100 * time.Millisecond)
	kh.committed(ctx)
	clk.Advance(100 * time.Millisecond)
	kh.fetchFailed(ctx, "fetching webhooks.deliveries/1", errors.New("UNKNOWN_SERVER_ERROR"))
	if !kh.down {
		t.Fatal("a commit between fetch errors ended the outage")
	}
	if n := strings.Count(buf.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d WARNs for one outage, want 1:\n%s", n, buf.String())
	}
	kh.fetched(ctx)
	if kh.down {
		t.Fatal("records fetched did not end the outage")
	}

	kh.failed(ctx, "committing offsets", errors.New("broken pipe"))
	kh.fetchFailed(ctx, "fetching webhooks.attempts/0", errors.New("broken pipe"))
	clk.Advance(fetchQuiet)
	kh.committed(ctx)
	if kh.down {
		t.Fatal("a commit after fetches were quiet did not end the outage")
	}
	if n := strings.Count(buf.String(), "kafka is working again"); n != 2 {
		t.Fatalf("%d ends logged for two outages, want 2:\n%s", n, buf.String())
	}
}
