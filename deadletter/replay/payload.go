package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// Why a delivery's payload cannot be shown; ReadPayload's errors wrap one.
var (
	// ErrPayloadExpired: the topic's retention dropped the record.
	ErrPayloadExpired = errors.New("payload no longer retained")
	// ErrPayloadUnknown: the delivery row has no record position (written
	// before hookd kept them) and no dead letter.
	ErrPayloadUnknown = errors.New("payload position not recorded")
	// ErrPayloadUnavailable: Kafka did not answer in time.
	ErrPayloadUnavailable = errors.New("payload cannot be read now")
	// ErrPayloadMismatch: the record at the position is not this
	// delivery's (never shown: it could be another account's).
	ErrPayloadMismatch = errors.New("the record at the delivery's position is not its own")
)

// DefaultPayloadTimeout bounds ReadPayload when its timeout is zero.
const DefaultPayloadTimeout = 3 * time.Second

// Payload is a delivery's record as read from Kafka.
type Payload struct {
	// Record is the record read; Record.Value is the exact body sent.
	Record *kgo.Record
	// Delivery is Record decoded.
	Delivery *delivery.Delivery
	// DeadLetter: read from the dead-letter topic (the deliveries topic no
	// longer had it).
	DeadLetter bool
}

// ReadPayload reads the record of d: from the deliveries topic at the
// position the attempt-log writer recorded, else (a dead-lettered
// delivery) its dead letter. Reads are read_committed, by a short-lived
// direct consumer, within timeout. The record must be d's own (same
// delivery id and account), else ErrPayloadMismatch.
func ReadPayload(ctx context.Context, deps Deps, d store.Delivery, timeout time.Duration) (Payload, error) {
	if timeout <= 0 {
		timeout = DefaultPayloadTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := ErrPayloadUnknown
	if d.RecordTopic != "" && d.RecordPartition != nil && d.RecordOffset != nil {
		var p Payload
		p, err = readOwn(ctx, deps, d, d.RecordTopic, *d.RecordPartition, *d.RecordOffset)
		if err == nil || !errors.Is(err, ErrPayloadExpired) {
			return p, err
		}
	}
	if d.Status == "dead" && d.DLQTopic != "" && d.DLQPartition != nil && d.DLQOffset != nil {
		p, err := readOwn(ctx, deps, d, d.DLQTopic, *d.DLQPartition, *d.DLQOffset)
		p.DeadLetter = true
		return p, err
	}
	return Payload{}, err
}

func readOwn(ctx context.Context, deps Deps, d store.Delivery, topic string, partition int32, offset int64) (Payload, error) {
	rec, err := ReadRecord(ctx, deps, topic, partition, offset)
	if err != nil {
		return Payload{}, err
	}
	dv, err := delivery.Decode(rec)
	if err != nil || dv.ID != d.ID || dv.Account != d.Account {
		return Payload{}, ErrPayloadMismatch
	}
	return Payload{Record: rec, Delivery: dv}, nil
}

// ReadRecord fetches the committed record at topic/partition/offset until
// ctx ends: ErrPayloadExpired when the partition starts past it,
// ErrPayloadUnavailable when Kafka did not answer before ctx ended.
func ReadRecord(ctx context.Context, deps Deps, topic string, partition int32, offset int64) (*kgo.Record, error) {
	cl, err := kgo.NewClient(append(slices.Clip(deps.KafkaOpts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		// Records of an aborted router transaction were never delivered.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxPartitionBytes(1<<20))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing the start of %s: %w", ErrPayloadUnavailable, topic, err)
	}
	if o, ok := starts.Lookup(topic, partition); ok && o.Offset > offset {
		return nil, fmt.Errorf("%w: %s/%d starts at offset %d, past %d", ErrPayloadExpired, topic, partition, o.Offset, offset)
	}
	for {
		fs := cl.PollRecords(ctx, 10)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %s/%d offset %d not fetched in time", ErrPayloadUnavailable, topic, partition, offset)
		}
		var found *kgo.Record
		past := false
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case r.Offset == offset:
				found = r
			case r.Offset > offset:
				past = true
			}
		})
		if found != nil {
			return found, nil
		}
		if past {
			// Compacted away, or an aborted transaction's record.
			return nil, fmt.Errorf("%w: %s/%d has no committed record at offset %d", ErrPayloadExpired, topic, partition, offset)
		}
	}
}
