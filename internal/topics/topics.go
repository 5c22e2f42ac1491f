// Package topics owns the names and the provisioning of hookd's Kafka topics:
// which topics exist for a prefix and a retry schedule, with what partition
// count, retention and record size limit (max.message.bytes, the same on
// every topic), created idempotently at start-up with kadm. It never
// produces or consumes records.
//
// It imports retrytiers, a stage, for the retry schedule (Schedule, its
// default) and the tier topics' naming rule (TierName): outside the test
// helpers, the ground floor's one accepted upward edge, since the schedule
// decides which tier topics exist. retrytiers must never import topics.
//
// Internal: only hookd's own packages can import it.
package topics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/hookd/hookd/retrytiers"
)

// Record size limits shared by every hookd topic and client.
const (
	// DefaultMaxMessageBytes is the max.message.bytes hookd gives the topics
	// it creates, by default: Kafka's own default (1 MiB + 12). It is above
	// the default record batch limits of franz-go (1,000,012) and
	// librdkafka (1,000,000), so a client's full batch of small records is
	// accepted, and above any record hookd writes (an envelope of at most
	// MaxEnvelopeBytes plus hookd's headers). A larger record is refused by
	// the broker with MESSAGE_TOO_LARGE; an envelope between the envelope
	// limit and this one is accepted and dead-lettered by the router.
	DefaultMaxMessageBytes = 1048588
	// MinMaxMessageBytes is the smallest max.message.bytes hookd works
	// with: franz-go's default record batch limit, which hookd's clients
	// fill under load.
	MinMaxMessageBytes = 1000012
	// MaxEnvelopeBytes is the largest envelope limit (the router's and
	// relay's MaxEnvelopeBytes) hookd accepts: an envelope plus the headers
	// hookd adds on its way to a retry tier or the DLQ (16 KiB at most) must
	// fit one record batch of MinMaxMessageBytes.
	MaxEnvelopeBytes = 960 << 10
)

// Config names and sizes the topics.
type Config struct {
	// Prefix starts every topic name. Defaults to "webhooks".
	Prefix string
	// Partitions is the partition count of every hookd topic; deliveries,
	// retry tiers and the DLQ must share it so that one endpoint's records
	// land on the same partition number everywhere. Defaults to 12.
	Partitions int32
	// ReplicationFactor of created topics; -1 means the broker's default
	// (default.replication.factor). Existing topics are never changed.
	// Defaults to -1; hookd's command line uses 3 with --brokers and 1 on
	// the embedded broker.
	ReplicationFactor int16
	// MinInsyncReplicas is min.insync.replicas of created topics: how many
	// replicas must have a record before an acks=all produce succeeds, so
	// an acknowledged record survives losing MinInsyncReplicas-1 brokers.
	// -1 means the broker's default. Defaults to 2 when ReplicationFactor
	// is 3 or more, 1 when it is 1 or 2, and -1 when it is -1.
	MinInsyncReplicas int16
	// Schedule gives one retry topic per delay. Defaults to
	// retrytiers.DefaultSchedule.
	Schedule retrytiers.Schedule
	// Retention of the events, deliveries and attempts topics. Defaults to 7 days.
	Retention time.Duration
	// DLQRetention of the dead-letter and operational topics. Defaults to
	// 30 days, and is never less.
	DLQRetention time.Duration
	// MaxMessageBytes is max.message.bytes of every topic hookd creates:
	// the largest record batch the broker accepts. Existing topics are not
	// changed, but one below MinMaxMessageBytes is an error. Between
	// MinMaxMessageBytes and 1 GiB. Defaults to DefaultMaxMessageBytes.
	MaxMessageBytes int32
}

// SetDefaults fills zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.Prefix == "" {
		c.Prefix = "webhooks"
	}
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.MinInsyncReplicas == 0 {
		switch {
		case c.ReplicationFactor >= 3:
			c.MinInsyncReplicas = 2
		case c.ReplicationFactor >= 1:
			c.MinInsyncReplicas = 1
		default:
			c.MinInsyncReplicas = -1
		}
	}
	if c.Schedule == nil {
		c.Schedule, _ = retrytiers.ParseSchedule(retrytiers.DefaultSchedule)
	}
	if c.Retention == 0 {
		c.Retention = 7 * 24 * time.Hour
	}
	if c.DLQRetention == 0 {
		c.DLQRetention = 30 * 24 * time.Hour
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
}

// Validate reports the first bad field.
func (c *Config) Validate() error {
	switch {
	case !validName(c.Prefix):
		return fmt.Errorf("topic prefix: %q must be letters, digits, '.', '_' or '-'", c.Prefix)
	case c.Partitions < 1 || c.Partitions > 10000:
		return fmt.Errorf("partitions: must be between 1 and 10000, got %d", c.Partitions)
	case c.ReplicationFactor == 0 || c.ReplicationFactor < -1:
		return fmt.Errorf("replication factor: must be -1 (broker default) or at least 1, got %d", c.ReplicationFactor)
	case c.MinInsyncReplicas == 0 || c.MinInsyncReplicas < -1:
		return fmt.Errorf("min insync replicas: must be -1 (broker default) or at least 1, got %d", c.MinInsyncReplicas)
	case c.ReplicationFactor > 0 && c.MinInsyncReplicas > c.ReplicationFactor:
		return fmt.Errorf("min insync replicas: %d exceeds the replication factor %d; every produce would fail", c.MinInsyncReplicas, c.ReplicationFactor)
	case len(c.Schedule) == 0:
		return errors.New("retry schedule: names no tier")
	case c.Retention < time.Hour:
		return fmt.Errorf("topic retention: must be at least 1h, got %s", c.Retention)
	case c.DLQRetention < 30*24*time.Hour:
		return fmt.Errorf("dlq retention: must be at least 720h (30 days), got %s", c.DLQRetention)
	case c.MaxMessageBytes < MinMaxMessageBytes || c.MaxMessageBytes > 1<<30:
		return fmt.Errorf("max message bytes: must be between %d and %d, got %d", MinMaxMessageBytes, 1<<30, c.MaxMessageBytes)
	}
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Names are the topic names for one prefix and schedule.
type Names struct {
	// Events is the ingress topic applications produce envelopes to.
	Events string
	// Deliveries holds one record per (event, endpoint), keyed by endpoint id.
	Deliveries string
	// Retry holds one topic per tier, in schedule order.
	Retry []string
	// DLQ is the dead-letter topic.
	DLQ string
	// Attempts buffers attempt records on their way to the Postgres log.
	Attempts string
	// Intents holds the dispatchers' intent records: one per request,
	// acknowledged before it goes on the wire, read back only when a
	// partition is resumed. One partition, so that a produce request
	// carries one batch of them, and apart from Attempts, so that the
	// attempt-log writer never fetches them.
	Intents string
	// Ops carries operational events such as endpoint.disabled.
	Ops string
	// Dedupe is the router's dedupe changelog: compacted, one record per
	// event fanned out (key = account and event id), written to the
	// partition of the events-topic partition the event was read from, in
	// the transaction that fans it out.
	Dedupe string
}

// NamesFor returns the topic names of cfg (defaults applied).
func NamesFor(cfg Config) Names {
	cfg.SetDefaults()
	n := Names{
		Events:     cfg.Prefix + ".events",
		Deliveries: cfg.Prefix + ".deliveries",
		DLQ:        cfg.Prefix + ".dlq",
		Attempts:   cfg.Prefix + ".attempts",
		Intents:    cfg.Prefix + ".intents",
		Ops:        cfg.Prefix + ".ops",
		Dedupe:     cfg.Prefix + ".dedupe",
	}
	for _, d := range cfg.Schedule {
		n.Retry = append(n.Retry, cfg.Prefix+".retry."+retrytiers.TierName(d))
	}
	return n
}

// Spec is one topic hookd wants.
type Spec struct {
	Name       string
	Partitions int32
	Retention  time.Duration
	// Compact makes the topic compacted as well as time-bounded
	// (cleanup.policy compact,delete): a changelog keeps one record per
	// key, and none older than Retention.
	Compact bool
}

// Specs lists every topic of cfg with its partitions and retention.
func Specs(cfg Config) []Spec {
	cfg.SetDefaults()
	n := NamesFor(cfg)
	specs := []Spec{
		{Name: n.Events, Partitions: cfg.Partitions, Retention: cfg.Retention},
		{Name: n.Deliveries, Partitions: cfg.Partitions, Retention: cfg.Retention},
		// One changelog partition per events partition; the router reads
		// back at most its dedupe window (7 days at most) of it.
		{Name: n.Dedupe, Partitions: cfg.Partitions, Retention: cfg.Retention, Compact: true},
	}
	for i, d := range cfg.Schedule {
		// A record may wait in a tier for its delay, plus a margin for
		// outages: delay + 7 days.
		specs = append(specs, Spec{Name: n.Retry[i], Partitions: cfg.Partitions, Retention: d + 7*24*time.Hour})
	}
	specs = append(specs,
		Spec{Name: n.DLQ, Partitions: cfg.Partitions, Retention: cfg.DLQRetention},
		Spec{Name: n.Attempts, Partitions: cfg.Partitions, Retention: cfg.Retention},
		Spec{Name: n.Intents, Partitions: 1, Retention: cfg.Retention},
		Spec{Name: n.Ops, Partitions: 1, Retention: cfg.DLQRetention},
	)
	return specs
}

// ProvisionResult says what Provision did.
type ProvisionResult struct {
	Created  []string
	Existing []string
	// Warnings are one line each about existing topics Provision could
	// not check (for the caller to log).
	Warnings []string
}

// Provision creates every missing topic of cfg and checks the existing ones.
// It is idempotent. An existing topic whose partition count differs from
// the configured one is an error: changing it would move endpoints between
// partitions under a running dispatcher.
func Provision(ctx context.Context, adm *kadm.Client, cfg Config) (ProvisionResult, error) {
	var res ProvisionResult
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	specs := Specs(cfg)
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return res, fmt.Errorf("listing topics: %w", err)
	}
	for _, s := range specs {
		d, ok := details[s.Name]
		if ok && d.Err == nil {
			if got := int32(len(d.Partitions)); got != s.Partitions {
				return res, fmt.Errorf("topic %s has %d partitions but --partitions is %d; use --partitions %d or a new --topic-prefix",
					s.Name, got, s.Partitions, got)
			}
			res.Existing = append(res.Existing, s.Name)
			continue
		}
		if ok && !errors.Is(d.Err, kerr.UnknownTopicOrPartition) {
			return res, fmt.Errorf("describing topic %s: %w", s.Name, d.Err)
		}
		retention := strconv.FormatInt(s.Retention.Milliseconds(), 10)
		policy := "delete"
		if s.Compact {
			policy = "compact,delete"
		}
		configs := map[string]*string{"retention.ms": &retention, "cleanup.policy": &policy,
			"max.message.bytes": kadm.StringPtr(strconv.Itoa(int(cfg.MaxMessageBytes)))}
		if cfg.MinInsyncReplicas > 0 {
			configs["min.insync.replicas"] = kadm.StringPtr(strconv.Itoa(int(cfg.MinInsyncReplicas)))
		}
		resp, err := adm.CreateTopic(ctx, s.Partitions, cfg.ReplicationFactor, configs, s.Name)
		if errors.Is(err, kerr.TopicAlreadyExists) || errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			// Another process created it since we listed.
			res.Existing = append(res.Existing, s.Name)
			continue
		}
		if errors.Is(err, kerr.InvalidReplicationFactor) || errors.Is(resp.Err, kerr.InvalidReplicationFactor) {
			return res, fmt.Errorf("creating topic %s: replication factor %d is more than the cluster's brokers; lower --replication-factor (and --min-insync-replicas)", s.Name, cfg.ReplicationFactor)
		}
		if err != nil {
			return res, fmt.Errorf("creating topic %s: %w", s.Name, err)
		}
		if resp.Err != nil {
			msg := resp.Err.Error()
			if resp.ErrMessage != "" {
				msg += ": " + resp.ErrMessage
			}
			return res, fmt.Errorf("creating topic %s: %s", s.Name, msg)
		}
		res.Created = append(res.Created, s.Name)
	}
	warnings, err := checkMaxMessageBytes(ctx, adm, res.Existing)
	res.Warnings = warnings
	return res, err
}

// checkMaxMessageBytes refuses existing topics whose max.message.bytes is
// below MinMaxMessageBytes: the broker would refuse hookd's full batches,
// and a relay or router would retry them forever. A topic whose
// configuration cannot be read (no DESCRIBE_CONFIGS permission) is a
// warning.
func checkMaxMessageBytes(ctx context.Context, adm *kadm.Client, existing []string) ([]string, error) {
	if len(existing) == 0 {
		return nil, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, existing...)
	if err != nil {
		return []string{fmt.Sprintf("cannot read max.message.bytes of the existing topics: %v", err)}, nil
	}
	var warnings []string
	for _, rc := range rcs {
		if rc.Err != nil {
			warnings = append(warnings, fmt.Sprintf("cannot read max.message.bytes of topic %s: %v", rc.Name, rc.Err))
			continue
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			if n, err := strconv.Atoi(*c.Value); err == nil && n < MinMaxMessageBytes {
				return warnings, fmt.Errorf("topic %s has max.message.bytes %d, below the %d hookd needs (its clients write record batches up to that size); raise it, e.g. kafka-configs --alter --entity-type topics --entity-name %s --add-config max.message.bytes=%d",
					rc.Name, n, MinMaxMessageBytes, rc.Name, DefaultMaxMessageBytes)
			}
		}
	}
	return warnings, nil
}

// Info describes one topic for `hookctl topics list`.
type Info struct {
	Name       string `json:"name"`
	Partitions int    `json:"partitions"`
	// EndOffsets is the sum of the partitions' end offsets: how many records
	// the topic ever received (before retention).
	EndOffsets int64  `json:"end_offsets"`
	Retention  string `json:"retention,omitempty"`
	Missing    bool   `json:"missing,omitempty"`
}

// List describes every topic of cfg, in Specs order.
func List(ctx context.Context, adm *kadm.Client, cfg Config) ([]Info, error) {
	specs := Specs(cfg)
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	var present []string
	for _, n := range names {
		if d, ok := details[n]; ok && d.Err == nil {
			present = append(present, n)
		}
	}
	ends := map[string]int64{}
	if len(present) > 0 {
		offs, err := adm.ListEndOffsets(ctx, present...)
		if err != nil {
			return nil, fmt.Errorf("listing end offsets: %w", err)
		}
		offs.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset > 0 {
				ends[o.Topic] += o.Offset
			}
		})
	}
	retention := map[string]string{}
	if len(present) > 0 {
		rcs, err := adm.DescribeTopicConfigs(ctx, present...)
		if err == nil {
			for _, rc := range rcs {
				for _, c := range rc.Configs {
					if c.Key == "retention.ms" && c.Value != nil {
						if ms, err := strconv.ParseInt(*c.Value, 10, 64); err == nil {
							retention[rc.Name] = retrytiers.TierName(time.Duration(ms) * time.Millisecond)
						}
					}
				}
			}
		}
	}
	out := make([]Info, 0, len(specs))
	for _, n := range names {
		info := Info{Name: n, Missing: !slices.Contains(present, n)}
		if !info.Missing {
			info.Partitions = len(details[n].Partitions)
			info.EndOffsets = ends[n]
			info.Retention = retention[n]
		}
		out = append(out, info)
	}
	return out, nil
}
