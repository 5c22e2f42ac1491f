package attemptlog

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/clock/fakeclock"
)

// A partition reset the client reports is a WARN of its own when nothing
// else is wrong, and an INFO during an outage or just after it (its likely
// cause); it never starts an outage.
func TestKafkaHealthPartitionResets(t *testing.T) {
	var buf bytes.Buffer
	clk := fakeclock.New(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	up := prometheus.NewGauge(prometheus.GaugeOpts{Name: "up"})
	kh := newKafkaHealth(slog.New(slog.NewTextHandler(&buf, nil)), clk, up)
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
	kh.ok(ctx)
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
