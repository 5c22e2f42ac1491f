package relay_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A relay told to stop while its stream is idle returns at once, not when
// its next status update falls due: the read waiting on the replication
// connection is cut short. Fails when the read waits out its deadline (the
// 30s StatusInterval here: it took 10.4s in one run).
func TestStopCutsTheIdleRead(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg := e.relayConfig()
	cfg.StatusInterval = 30 * time.Second
	stop := start(t, e.newRelay(t, cfg).Run)
	e.waitStreaming(t)

	began := time.Now()
	require.NoError(t, stop())
	took := time.Since(began)
	require.Less(t, took, 2*time.Second, "stopping took %s", took)
	t.Logf("stopped in %s", took)
}
