package cli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/proctest"
)

// TestMeasureReplay measures a replay of many dead letters by the real
// hookctl binary: records/s and the process's peak RSS (getrusage
// maxrss), for the dry run (a scan) and the replay. It runs only when
// HOOKD_REPLAY_MEASURE is set to the number of dead letters, e.g.
//
//	HOOKD_REPLAY_MEASURE=100000 scripts/test.sh -run TestMeasureReplay -v ./cmd/hookctl/cli/
func TestMeasureReplay(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("HOOKD_REPLAY_MEASURE"))
	if n <= 0 {
		t.Skip("set HOOKD_REPLAY_MEASURE=<dead letters> to measure")
	}
	e := newEnv(t)
	const endpoints = 100
	for i := range endpoints {
		e.endpoint(t, fmt.Sprintf("ep_%03d", i), "acct_bench", false)
	}
	cl := e.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(1<<20))
	ctx := context.Background()
	start := time.Now()
	const batch = 5000
	recs := make([]*kgo.Record, 0, batch)
	for i := range n {
		ep := fmt.Sprintf("ep_%03d", i%endpoints)
		evt := fmt.Sprintf("evt_bench_%07d", i)
		body, err := delivery.Body(evt, "invoice.paid", time.Now(), []byte(`{"invoice":"in_1234567890","amount":4200,"currency":"eur"}`))
		require.NoError(t, err)
		d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep, Account: "acct_bench",
			EventCreated: time.Now(), Attempt: 11, FirstAttempt: time.Now(), LastStatus: 503, Body: body}
		src := d.Record(e.names.Retry[0])
		src.Partition = partitionOf(ep, e.parts)
		recs = append(recs, deadletter.Record(e.names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic, Attempts: 11,
			LastStatus: 503, ErrorClass: "http_5xx", Reason: deadletter.ReasonRetriesExhausted, DeadAt: time.Now()}))
		if len(recs) == batch || i == n-1 {
			require.NoError(t, cl.ProduceSync(ctx, recs...).FirstErr())
			recs = recs[:0]
		}
	}
	t.Logf("produced %d dead letters in %s", n, time.Since(start).Round(time.Millisecond))

	bin := proctest.Binary(t, "hookctl")
	measure := func(what string, args ...string) {
		cmd := exec.Command(bin, append(e.args(), args...)...)
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		elapsed := time.Since(start)
		require.NoError(t, err, out.String())
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		t.Logf("%s: %d dead letters in %s = %.0f records/s, peak RSS %.1f MiB (%s)", what, n, elapsed.Round(time.Millisecond),
			float64(n)/elapsed.Seconds(), float64(ru.Maxrss)/1024, lines[len(lines)-1])
	}
	measure("dry run (scan)", "dlq", "replay", "--reason", "bench", "--dry-run", "-o", "json")
	measure("replay", "dlq", "replay", "--reason", "bench")
	got := e.replayedEvents(t)
	require.Len(t, got, n)
}
