package store_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
)

// The failing warning is owed once per episode: marked, it is not listed
// again; a success closes the episode (recovered, once); a new episode is
// owed again.
func TestFailingWarnedOncePerEpisode(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep_f")
	write(t, db, t0.Add(time.Hour), rec("d1", "ep_f", 1, attempt.OutcomeRetry, attempt.NextRetry))
	cutoff := t0.Add(time.Hour)
	fs, err := db.Store.FailingToWarn(ctx, cutoff, 10)
	require.NoError(t, err)
	require.Len(t, fs, 1)
	require.Equal(t, 503, fs[0].LastStatus)
	require.Equal(t, "http_5xx", fs[0].LastErrorClass)
	require.NoError(t, db.Store.MarkFailingWarned(ctx, "ep_f", fs[0].FailingSince))
	fs, err = db.Store.FailingToWarn(ctx, cutoff, 10)
	require.NoError(t, err)
	require.Empty(t, fs, "warned once per episode")

	rs, err := db.Store.RecoveredToAnnounce(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, rs, "still failing")
	write(t, db, t0.Add(time.Hour), rec("d1", "ep_f", 2, attempt.OutcomeDelivered, attempt.NextDone))
	rs, err = db.Store.RecoveredToAnnounce(ctx, 10)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.NoError(t, db.Store.MarkRecoveredAnnounced(ctx, "ep_f", rs[0].FailingSince))
	rs, err = db.Store.RecoveredToAnnounce(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, rs, "recovered once")

	write(t, db, t0.Add(time.Hour), rec("d1", "ep_f", 3, attempt.OutcomeRetry, attempt.NextRetry))
	fs, err = db.Store.FailingToWarn(ctx, cutoff, 10)
	require.NoError(t, err)
	require.Len(t, fs, 1, "a new episode is warned again")
}

// N dead letters of one endpoint in one hour are one alert with count N;
// sweeping again (a restart) adds nothing. A dead letter replayed and
// delivered since counts neither in the alert nor in the portal's banner.
func TestDeadLetterHoursAggregatedOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep_d")
	var recs []*attempt.Record
	for i := range 7 {
		recs = append(recs, rec(fmt.Sprintf("dd%d", i), "ep_d", 1, attempt.OutcomeRetry, attempt.NextDeadLetter))
	}
	write(t, db, t0.Add(time.Hour), recs...)
	write(t, db, t0.Add(time.Hour), rec("dd7", "ep_d", 1, attempt.OutcomeRetry, attempt.NextDeadLetter))
	write(t, db, t0.Add(time.Hour), rec("dd7", "ep_d", 2, attempt.OutcomeDelivered, attempt.NextDone)) // replayed
	// The first sweep of a fresh database takes the last whole hour only.
	n, err := db.Store.SweepDeadLetterHours(ctx, t0.Add(time.Hour))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = db.Store.SweepDeadLetterHours(ctx, t0.Add(time.Hour+30*time.Minute))
	require.NoError(t, err)
	require.Zero(t, n, "an hour is aggregated once")
	owed, err := db.Store.OwedDeadLetterAlerts(ctx, 10)
	require.NoError(t, err)
	require.Len(t, owed, 1)
	require.Equal(t, 7, owed[0].Count)
	require.Equal(t, "acct_1", owed[0].Account)
	require.True(t, owed[0].Hour.Equal(t0), "%s", owed[0].Hour)
	require.Len(t, owed[0].SampleEventIDs, 5)
	require.True(t, strings.HasPrefix(owed[0].SampleEventIDs[0], "evt-dd"))
	require.NoError(t, db.Store.MarkDeadLetterAlertNotified(ctx, "ep_d", owed[0].Hour))
	owed, err = db.Store.OwedDeadLetterAlerts(ctx, 10)
	require.NoError(t, err)
	require.Empty(t, owed)

	c, err := db.Store.CountDeadLetters(ctx, "acct_1", []string{"ep_d"}, t0.Add(30*time.Minute))
	require.NoError(t, err)
	require.EqualValues(t, 7, c["ep_d"].LastHour)
	require.EqualValues(t, 7, c["ep_d"].LastDay)
}
