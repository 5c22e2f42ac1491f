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
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// evidence is what the detail page shows of a delivery's payload.
type evidence struct {
	// Available is false when the payload cannot be shown; Why says why.
	Available bool
	Why       string
	Pretty    string
	Bytes     int
	SHA256    string
	// FromDLQ: read from the delivery's dead letter (DeadAt, Prov), else
	// from the deliveries topic.
	FromDLQ bool
	DeadAt  time.Time
	Prov    deadletter.Provenance
	// record is the dead letter itself, for a replay.
	record *kgo.Record
}

// payload reads what the detail page shows of d's payload: a dead
// letter's from the DLQ (with its provenance), any other's (or an expired
// dead letter's) from the deliveries topic while retention keeps it.
func (h *Handler) payload(ctx context.Context, d store.Delivery) evidence {
	if d.Status == "dead" {
		if ev := h.deadLetter(ctx, d); ev.Available {
			return ev
		}
	}
	be, _ := h.backend()
	p, err := replay.ReadPayload(ctx, be.Replay, d, h.cfg.PayloadTimeout)
	if err != nil {
		return evidence{Why: h.payloadWhy(ctx, d, err)}
	}
	ev := evidence{Available: true, FromDLQ: p.DeadLetter}
	if p.DeadLetter {
		ev.DeadAt = p.Record.Timestamp.UTC()
	}
	ev.fill(p.Record)
	return ev
}

// payloadWhy says plainly why d's payload cannot be shown.
func (h *Handler) payloadWhy(ctx context.Context, d store.Delivery, err error) string {
	switch {
	case errors.Is(err, replay.ErrPayloadExpired):
		return fmt.Sprintf("The payload has expired: the deliveries topic keeps records %s and the dead-letter topic %s, "+
			"and this delivery's record is gone from Kafka.", formatDuration(h.cfg.Topics.Retention), formatDuration(h.cfg.Topics.DLQRetention))
	case errors.Is(err, replay.ErrPayloadUnknown):
		return "This delivery was logged before " + h.cfg.Name + " recorded where each payload is kept, so its payload cannot be shown."
	case errors.Is(err, replay.ErrPayloadMismatch):
		return "The record at this delivery's position is not this delivery's, so it is not shown."
	}
	h.logger.WarnContext(ctx, "portal: reading a payload", "delivery_id", d.ID, "error", err)
	return "The payload cannot be read right now (Kafka did not answer in time); reload the page to try again."
}

// fill sets the shown body, size and digest from rec.
func (ev *evidence) fill(rec *kgo.Record) {
	ev.Bytes = len(rec.Value)
	sum := sha256.Sum256(rec.Value)
	ev.SHA256 = hex.EncodeToString(sum[:])
	ev.Pretty = indentJSON(rec.Value)
}

// deadLetter reads the dead letter of d from the DLQ, checking that it is
// d's own record (same delivery id and account): a position never shows
// another account's data.
func (h *Handler) deadLetter(ctx context.Context, d store.Delivery) evidence {
	if d.Status != "dead" || d.DLQTopic == "" || d.DLQPartition == nil || d.DLQOffset == nil {
		return evidence{Why: "This delivery is not dead-lettered."}
	}
	be, _ := h.backend()
	rctx, cancel := context.WithTimeout(ctx, h.cfg.PayloadTimeout)
	defer cancel()
	rec, err := replay.ReadRecord(rctx, be.Replay, d.DLQTopic, *d.DLQPartition, *d.DLQOffset)
	if err != nil {
		if !errors.Is(err, replay.ErrPayloadExpired) {
			h.logger.WarnContext(ctx, "portal: reading a dead letter", "delivery_id", d.ID, "error", err)
		}
		return evidence{Why: fmt.Sprintf("The dead letter is no longer retained (the dead-letter topic keeps records %s), "+
			"or Kafka did not answer in time.", formatDuration(h.cfg.Topics.DLQRetention))}
	}
	dv, err := delivery.Decode(rec)
	if err != nil || dv.ID != d.ID || dv.Account != d.Account {
		return evidence{Why: "The dead letter at this delivery's position is not this delivery's record."}
	}
	ev := evidence{Available: true, FromDLQ: true, DeadAt: rec.Timestamp.UTC(), record: rec}
	ev.fill(rec)
	ev.Prov, _ = deadletter.Read(rec)
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
