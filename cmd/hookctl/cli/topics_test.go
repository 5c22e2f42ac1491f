package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// hookd ran with the default schedule (its tiers still exist, one holds a
// record), then with 2s,4s, which it recorded: topics list names 2s and 4s
// without --retry-schedule, says where the schedule came from, and lists
// the old tiers with a warning for the one that holds records.
func TestTopicsListUsesTheRecordedSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	old := topics.Config{Partitions: 2}
	old.SetDefaults()
	cluster := kafkatest.NewProvisioned(t, old)
	short, err := retrytiers.ParseSchedule("2s,4s")
	require.NoError(t, err)
	cur := topics.Config{Partitions: 2, Schedule: short}
	cur.SetDefaults()
	cl := cluster.Client(t)
	_, err = topics.Provision(ctx, kadm.NewClient(cl), cur)
	require.NoError(t, err)
	oldTier := topics.NamesFor(old).Retry[0]
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: oldTier, Value: []byte("waiting")}).FirstErr())
	require.NoError(t, db.Store.RecordInstallation(ctx, store.Installation{TopicPrefix: "webhooks", Partitions: 2,
		RetrySchedule: short.String(), TierTopics: topics.NamesFor(cur).Retry, WrittenBy: "hookd test"}))

	brokers := "--brokers=" + strings.Join(cluster.Addrs, ",")
	code, out, errOut := hookctl(t, db, "topics", "list", brokers)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "retry schedule 2s,4s (recorded by hookd test at ")
	require.Contains(t, out, "webhooks.retry.2s ")
	require.Contains(t, out, "webhooks.retry.4s ")
	require.Contains(t, out, oldTier+" ")
	require.Contains(t, out, "warning: "+oldTier+" holds 1 records but the retry schedule 2s,4s no longer names it")
	require.Equal(t, 1, strings.Count(out, "warning:"), "empty old tiers are listed without a warning:\n%s", out)

	code, out, errOut = hookctl(t, db, "topics", "list", brokers, "--retry-schedule", "30s,5m,30m,2h,6h,24h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "(from --retry-schedule)")
	require.Contains(t, out, "webhooks.retry.2s ")
	require.Contains(t, out, "webhooks.retry.2s  ")
	require.NotContains(t, out, "warning:", "2s and 4s are orphans of this schedule, but empty")
}
