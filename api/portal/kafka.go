package portal

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// errNotRetained: the record is no longer in Kafka (retention), or Kafka
// did not answer in time.
var errNotRetained = errors.New("not retained")

// readRecord fetches the record at topic/partition/offset, within the
// payload timeout.
func (h *Handler) readRecord(ctx context.Context, topic string, partition int32, offset int64) (*kgo.Record, error) {
	be, _ := h.backend()
	cl, err := kgo.NewClient(append(slices.Clip(be.Replay.KafkaOpts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(offset)}}),
		// Records of an aborted router transaction were never delivered.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxPartitionBytes(1<<20))...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PayloadTimeout)
	defer cancel()
	for {
		fs := cl.PollRecords(ctx, 10)
		if ctx.Err() != nil {
			return nil, errNotRetained
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
			return nil, errNotRetained
		}
	}
}

// evidence is what the detail page shows of a delivery's payload.
type evidence struct {
	// Available is false when the payload is not retained any more (or
	// was never kept: only dead letters are).
	Available bool
	Why       string
	Pretty    string
	Bytes     int
	SHA256    string
	DeadAt    time.Time
	Prov      deadletter.Provenance
	// record is the dead letter itself, for a replay.
	record *kgo.Record
}

// deadLetter reads the dead letter of d from the DLQ, checking that it is
// d's own record (same delivery id and account): a position never shows
// another account's data.
func (h *Handler) deadLetter(ctx context.Context, d store.Delivery) evidence {
	if d.Status != "dead" || d.DLQTopic == "" || d.DLQPartition == nil || d.DLQOffset == nil {
		return evidence{Why: "hookd keeps payloads in Kafka only: a dead-lettered delivery's payload is shown from " +
			"its dead letter; this delivery is not dead-lettered, so its payload is not kept where the portal can read it."}
	}
	rec, err := h.readRecord(ctx, d.DLQTopic, *d.DLQPartition, *d.DLQOffset)
	if err != nil {
		if !errors.Is(err, errNotRetained) {
			h.logger.WarnContext(ctx, "portal: reading a dead letter", "delivery_id", d.ID, "error", err)
		}
		return evidence{Why: fmt.Sprintf("The dead letter is no longer retained (the dead-letter topic keeps records %s), "+
			"or Kafka did not answer in time.", formatDuration(h.cfg.Topics.DLQRetention))}
	}
	dv, err := delivery.Decode(rec)
	if err != nil || dv.ID != d.ID || dv.Account != d.Account {
		return evidence{Why: "The dead letter at this delivery's position is not this delivery's record."}
	}
	ev := evidence{Available: true, Bytes: len(rec.Value), DeadAt: rec.Timestamp.UTC(), record: rec}
	sum := sha256.Sum256(rec.Value)
	ev.SHA256 = hex.EncodeToString(sum[:])
	ev.Prov, _ = deadletter.Read(rec)
	ev.Pretty = indentJSON(rec.Value)
	return ev
}

// indentJSON shows a body as indented JSON (as is when it is not JSON).
func indentJSON(b []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}

// sendTest produces a test event for endpoint e: a delivery record on the
// deliveries topic, exactly as the router fans an event out, so it is
// signed, retried, dead-lettered and logged like any other delivery.
func (h *Handler) sendTest(ctx context.Context, e endpoint.Endpoint, eventType, actor string) (string, error) {
	be, _ := h.backend()
	var b [12]byte
	_, _ = rand.Read(b[:])
	evt := "evt_test_" + hex.EncodeToString(b[:])
	now := h.now().UTC()
	data, err := h.testData(ctx, eventType, actor)
	if err != nil {
		return "", err
	}
	body, err := delivery.Body(evt, eventType, now, data)
	if err != nil {
		return "", err
	}
	d := delivery.Delivery{ID: delivery.ID(evt, e.ID), EventID: evt, EventType: eventType, EndpointID: e.ID,
		Account: e.Account, EventCreated: now, Body: body}
	cl, err := kgo.NewClient(be.Replay.KafkaOpts...)
	if err != nil {
		return "", fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, d.Record(be.Replay.Names.Deliveries)).FirstErr(); err != nil {
		return "", fmt.Errorf("producing the test event: %w", err)
	}
	return evt, nil
}
