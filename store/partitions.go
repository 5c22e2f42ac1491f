package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// PartitionResult says what MaintainAttemptPartitions changed.
type PartitionResult struct {
	// Ensured lists the daily partitions that exist now for today and ahead.
	Ensured []string
	// Dropped lists the partitions removed for being older than the retention.
	Dropped []string
}

// MaintainAttemptPartitions keeps one partition of the attempt log
// (webhooks.attempt_rows) per UTC day: it creates the partitions for today
// and the next ahead days if they are missing, and drops every daily
// partition that ends before now - retention, moving the horizon of the
// attempts delivery rows hold (webhooks.attempt_horizon) past its day.
// That hides those attempts from the log; ClearExpiredHeldAttempts erases
// them from the delivery rows. It also prunes webhooks.replay_sends older
// than the retention. It is idempotent and cheap; hookd runs it at
// start-up and then hourly.
func (s *Store) MaintainAttemptPartitions(ctx context.Context, now time.Time, ahead int, retention time.Duration) (PartitionResult, error) {
	var res PartitionResult
	if ahead < 0 {
		return res, fmt.Errorf("partitions ahead: must not be negative, got %d", ahead)
	}
	if retention < 24*time.Hour {
		return res, fmt.Errorf("attempt retention: must be at least 24h, got %s", retention)
	}
	// Several hookd processes run this at start-up; serialise them, since
	// concurrent CREATE TABLE IF NOT EXISTS can still collide.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, fmt.Errorf("attempt partitions: %s", oneLine(err))
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", partitionLockKey); err != nil {
		return res, fmt.Errorf("attempt partitions lock: %s", oneLine(err))
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", partitionLockKey)
	}()
	today := now.UTC().Truncate(24 * time.Hour)
	for i := 0; i <= ahead; i++ {
		from := today.AddDate(0, 0, i)
		name := attemptPartitionName(from)
		_, err := conn.Exec(ctx, fmt.Sprintf(
			`CREATE TABLE IF NOT EXISTS webhooks.%s PARTITION OF webhooks.attempt_rows FOR VALUES FROM ('%s') TO ('%s')`,
			name, from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339)))
		if err != nil {
			return res, fmt.Errorf("creating attempt partition %s: %s", name, oneLine(err))
		}
		res.Ensured = append(res.Ensured, name)
	}
	existing, err := s.attemptPartitions(ctx)
	if err != nil {
		return res, err
	}
	cutoff := now.UTC().Add(-retention)
	for _, name := range existing {
		day, err := time.Parse("20060102", strings.TrimPrefix(name, "attempts_p"))
		if err != nil {
			continue // not one of ours (attempts_default, a hand-made partition)
		}
		if day.AddDate(0, 0, 1).After(cutoff) {
			continue
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS webhooks.%s`, name)); err != nil {
			return res, fmt.Errorf("dropping attempt partition %s: %s", name, oneLine(err))
		}
		// The attempts delivery rows hold for that day go with it.
		if _, err := conn.Exec(ctx, `UPDATE webhooks.attempt_horizon SET horizon = $1 WHERE horizon < $1`, day.AddDate(0, 0, 1)); err != nil {
			return res, fmt.Errorf("moving the attempt log horizon past %s: %s", name, oneLine(err))
		}
		// So do that day's hours of the chart rollup.
		if _, err := conn.Exec(ctx, `DELETE FROM webhooks.attempt_hours WHERE hour < $1`, day.AddDate(0, 0, 1)); err != nil {
			return res, fmt.Errorf("pruning the hourly attempt rollup before %s: %s", name, oneLine(err))
		}
		res.Dropped = append(res.Dropped, name)
	}
	// Replays' records of what they sent are kept as long as the attempts
	// they led to.
	if _, err := conn.Exec(ctx, `DELETE FROM webhooks.replay_sends WHERE sent_at < $1`, cutoff); err != nil {
		return res, fmt.Errorf("pruning replay sends: %s", oneLine(err))
	}
	return res, nil
}

func (s *Store) attemptPartitions(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class p ON p.oid = i.inhparent
		JOIN pg_namespace n ON n.oid = p.relnamespace
		WHERE n.nspname = 'webhooks' AND p.relname = 'attempt_rows'
		ORDER BY c.relname`)
	if err != nil {
		return nil, fmt.Errorf("listing attempt partitions: %s", oneLine(err))
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, err
		}
		names = append(names, n)
	}
	return names, rows.Err()
}

// AttemptPartitions lists the partitions of the attempt log
// (webhooks.attempt_rows) by name.
func (s *Store) AttemptPartitions(ctx context.Context) ([]string, error) {
	return s.attemptPartitions(ctx)
}

// partitionLockKey is the advisory lock serialising partition maintenance
// ("hookdpar" in ASCII).
const partitionLockKey int64 = 0x686f6f6b64706172

func attemptPartitionName(day time.Time) string {
	return "attempts_p" + day.Format("20060102")
}
