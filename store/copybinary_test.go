package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/pgtest"
)

// TestStagedAttemptsKeepEveryField writes attempts through the writer's
// hand-built binary COPY (every field set, every nullable field NULL,
// timestamps with nanoseconds and far from the epoch, untrusted text) and
// reads each field back from the log and the delivery row.
func TestStagedAttemptsKeepEveryField(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	addEndpoint(t, db, "ep1")

	full := rec("dfull", "ep1", 1, attempt.OutcomeRetry, attempt.NextDeadLetter)
	full.EventCreated = time.Date(1999, 12, 31, 23, 59, 59, 999_999_999, time.UTC)
	full.StartedAt = time.Date(2026, 3, 10, 12, 0, 0, 123_456_789, time.FixedZone("x", 3600))
	full.Duration = 1500*time.Millisecond + 999*time.Microsecond
	full.NextDueAt = time.Date(9999, 1, 2, 3, 4, 5, 6000, time.UTC)
	full.ErrorClass, full.Error = "http_5xx", "bad\x00gateway \xff"
	full.ResponseExcerpt = strings.Repeat("é", 5000) // over the 8 KiB cap, cut inside a rune
	full.ReplayID, full.Destination = "rpl_1", "127.0.0.1:8080"
	full.BodySHA256 = strings.Repeat("ab", 32)
	full.DLQ.Partition, full.DLQ.Offset = 7, 1<<40

	bare := rec("dbare", "ep1", 1, attempt.OutcomeDelivered, attempt.NextDone)
	bare.StatusCode, bare.EventCreated, bare.BodySHA256 = 0, time.Time{}, "not a digest"
	write(t, db, t0, full, bare)

	type row struct {
		Started                     time.Time
		Duration                    int
		Status                      *int
		ErrorClass, Error, Excerpt  *string
		Replay, Destination, Digest *string
		Created, NextDue            *time.Time
		DeadReason, DLQTopic        *string
		DLQPartition                *int
		DLQOffset                   *int64
	}
	read := func(id string) row {
		var r row
		require.NoError(t, db.Store.Pool().QueryRow(ctx, `SELECT a.started_at, a.duration_ms, a.status_code, a.error_class,
			a.error, a.response_excerpt, a.replay_id, a.destination, a.body_sha256, d.event_created_at, d.next_due_at,
			d.dead_reason, d.dlq_topic, d.dlq_partition, d.dlq_offset
			FROM webhooks.attempts a JOIN webhooks.deliveries d ON d.id = a.delivery_id WHERE a.delivery_id = $1`, id).Scan(
			&r.Started, &r.Duration, &r.Status, &r.ErrorClass, &r.Error, &r.Excerpt, &r.Replay, &r.Destination, &r.Digest,
			&r.Created, &r.NextDue, &r.DeadReason, &r.DLQTopic, &r.DLQPartition, &r.DLQOffset))
		return r
	}

	f := read("dfull")
	require.True(t, f.Started.Equal(time.Date(2026, 3, 10, 11, 0, 0, 123_456_000, time.UTC)), "started_at %s", f.Started)
	require.Equal(t, 1500, f.Duration)
	require.Equal(t, 503, *f.Status)
	require.Equal(t, "http_5xx", *f.ErrorClass)
	require.Equal(t, "badgateway \uFFFD", *f.Error, "NUL dropped, invalid UTF-8 replaced")
	require.LessOrEqual(t, len(*f.Excerpt), 8<<10)
	require.Equal(t, strings.Repeat("é", 4096), strings.TrimSuffix(*f.Excerpt, "\uFFFD"))
	require.Equal(t, "rpl_1", *f.Replay)
	require.Equal(t, "127.0.0.1:8080", *f.Destination)
	require.Equal(t, strings.Repeat("ab", 32), *f.Digest)
	require.True(t, f.Created.Equal(time.Date(1999, 12, 31, 23, 59, 59, 999_999_000, time.UTC)), "event_created_at %s", f.Created)
	require.Nil(t, f.NextDue, "a dead delivery has no due time")
	require.Equal(t, "retries_exhausted", *f.DeadReason)
	require.Equal(t, "webhooks.dlq", *f.DLQTopic)
	require.Equal(t, 7, *f.DLQPartition)
	require.Equal(t, int64(1<<40), *f.DLQOffset)

	b := read("dbare")
	require.Nil(t, b.Status)
	require.Nil(t, b.ErrorClass)
	require.Nil(t, b.Error)
	require.Nil(t, b.Excerpt)
	require.Nil(t, b.Replay)
	require.Nil(t, b.Destination)
	require.Nil(t, b.Digest, "a malformed digest is dropped")
	require.True(t, b.Created.Equal(bare.StartedAt), "no event time: the attempt's start")
	require.Nil(t, b.DLQTopic)

	// A retrying delivery keeps its due time, far in the future too.
	retry := rec("dretry", "ep1", 1, attempt.OutcomeRetry, attempt.NextRetry)
	retry.NextDueAt = time.Date(9999, 1, 2, 3, 4, 5, 6000, time.UTC)
	write(t, db, t0, retry)
	require.True(t, getDelivery(t, db, "dretry").NextDue.Equal(retry.NextDueAt))
}
