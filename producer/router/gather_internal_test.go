package router

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A router stopping while it gathers a batch returns the batch at once:
// with its context ended it polls no more (a cancelled poll returns at
// once, so it would spin until the transaction interval ran out). The
// loop has no session here: a poll would panic.
func TestGatherStopsOnceContextEnded(t *testing.T) {
	t.Parallel()
	l := &loop{r: &Router{cfg: Config{MaxPollRecords: 100}}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	recs := []*kgo.Record{{Topic: "webhooks.events", Offset: 7}}
	got, err := l.gather(ctx, recs, time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Equal(t, recs, got)
}
