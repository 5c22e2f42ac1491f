package store

import (
	"context"
	"fmt"
	"time"
)

// Installation is the topic layout a hookd installation runs with, as its
// daemons recorded it at start-up (webhooks.installations, one row per topic
// prefix): hookctl reads it to name the tier topics without being told the
// retry schedule.
type Installation struct {
	TopicPrefix string
	Partitions  int32
	// RetrySchedule as --retry-schedule spells it ("30s,5m,...").
	RetrySchedule string
	// TierTopics are the retry tier topic names, in schedule order.
	TierTopics []string
	// WrittenBy names the hookd version and command that last wrote it.
	WrittenBy string
	UpdatedAt time.Time
}

// RecordInstallation writes in, replacing the row of its topic prefix.
func (s *Store) RecordInstallation(ctx context.Context, in Installation) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.installations
		(topic_prefix, partitions, retry_schedule, tier_topics, written_by, updated_at)
		VALUES ($1, $2, $3, $4, $5, now())
		ON CONFLICT (topic_prefix) DO UPDATE SET partitions = excluded.partitions,
			retry_schedule = excluded.retry_schedule, tier_topics = excluded.tier_topics,
			written_by = excluded.written_by, updated_at = now()`,
		in.TopicPrefix, in.Partitions, in.RetrySchedule, in.TierTopics, in.WrittenBy)
	if err != nil {
		return fmt.Errorf("recording the installation of %s: %s", in.TopicPrefix, oneLine(err))
	}
	return nil
}

// GetInstallation returns what hookd recorded for a topic prefix;
// ErrNotFound when no daemon has started with it yet.
func (s *Store) GetInstallation(ctx context.Context, prefix string) (Installation, error) {
	in := Installation{TopicPrefix: prefix}
	err := s.pool.QueryRow(ctx, `SELECT partitions, retry_schedule, tier_topics, written_by, updated_at
		FROM webhooks.installations WHERE topic_prefix = $1`, prefix).
		Scan(&in.Partitions, &in.RetrySchedule, &in.TierTopics, &in.WrittenBy, &in.UpdatedAt)
	if err != nil {
		return in, fmt.Errorf("reading the installation of %s: %w", prefix, translate(err))
	}
	return in, nil
}
