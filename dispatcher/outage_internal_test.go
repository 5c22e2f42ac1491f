package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOutageLastsUntilItsRecovery: a Kafka operation that failed once, a
// minute ago, and hung since (a broker frozen: no further failure is
// reported) still counts as failing for a resume, during the outage and
// right after its recovery; TestChaosBrokerFrozen60s re-sent three
// delivered requests when it did not (the new owner read the attempts
// topic before the previous owner's attempt records landed).
func TestOutageLastsUntilItsRecovery(t *testing.T) {
	ctx, log := context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil))
	o := &outage{what: "fetching records"}
	require.False(t, o.failedWithin(15*time.Second), "never failed")

	o.fail(ctx, log, errors.New("i/o timeout"))
	o.last.Store(time.Now().Add(-time.Minute).UnixNano()) // its only failure, a minute ago
	require.True(t, o.failedWithin(15*time.Second), "an outage not over yet")

	o.ok(ctx, log)
	require.True(t, o.failedWithin(15*time.Second), "an outage that ended just now")
	o.last.Store(time.Now().Add(-time.Minute).UnixNano())
	require.False(t, o.failedWithin(15*time.Second), "an outage that ended a minute ago")
}
