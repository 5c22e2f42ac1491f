package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/store"
)

// DeliveriesPayloadCmd prints a delivery's payload, read from Kafka as the
// API's GET /v1/deliveries/{id}/payload reads it (replay.ReadPayload). It
// is registered under `hookctl deliveries` (DeliveriesCmd).
type DeliveriesPayloadCmd struct {
	ID      string        `arg:"" help:"Delivery id (dlv_...)."`
	Timeout time.Duration `name:"timeout" default:"3s" help:"How long to wait for Kafka before giving up."`
}

// payloadJSON is -o json: the API's payload object.
type payloadJSON struct {
	DeliveryID string          `json:"delivery_id"`
	Source     string          `json:"source"`
	Topic      string          `json:"topic"`
	Partition  int32           `json:"partition"`
	Offset     int64           `json:"offset"`
	Bytes      int             `json:"bytes"`
	SHA256     string          `json:"sha256"`
	Payload    json.RawMessage `json:"payload"`
}

// Run implements `hookctl deliveries payload`: the exact body sent, as
// is (pipe it to jq), or with -o json where it was read from.
func (c *DeliveriesPayloadCmd) Run(ctx context.Context, g *Globals) error {
	if c.Timeout <= 0 {
		return Usage(fmt.Errorf("--timeout: must be positive, got %s", c.Timeout))
	}
	deps, done, err := replayDeps(ctx, g, true)
	if err != nil {
		return err
	}
	defer done()
	d, err := deps.Store.GetDelivery(ctx, store.AnyAccount, c.ID)
	if errors.Is(err, store.ErrNotFound) {
		return Usage(fmt.Errorf("no delivery %s in the delivery log (hookctl deliveries show takes an event id too)", c.ID))
	}
	if err != nil {
		return err
	}
	p, err := replay.ReadPayload(ctx, deps, d, c.Timeout)
	if err != nil {
		return payloadError(c.ID, err)
	}
	if !g.JSON() {
		_, err := fmt.Fprintf(g.Out(), "%s\n", p.Record.Value)
		return err
	}
	sum := sha256.Sum256(p.Record.Value)
	out := payloadJSON{DeliveryID: d.ID, Source: "deliveries", Topic: p.Record.Topic, Partition: p.Record.Partition,
		Offset: p.Record.Offset, Bytes: len(p.Record.Value), SHA256: hex.EncodeToString(sum[:]), Payload: p.Record.Value}
	if p.DeadLetter {
		out.Source = "dead_letter"
	}
	if !json.Valid(out.Payload) {
		out.Payload, _ = json.Marshal(string(p.Record.Value))
	}
	return g.PrintJSON(out)
}

// payloadError says in one line why id's payload cannot be printed: gone
// for good (exit 2, as a usage error: retrying will not help) or Kafka
// not answering (exit 1: try again).
func payloadError(id string, err error) error {
	switch {
	case errors.Is(err, replay.ErrPayloadExpired):
		return Usage(fmt.Errorf("the payload of %s is no longer retained by Kafka (%w)", id, err))
	case errors.Is(err, replay.ErrPayloadUnknown):
		return Usage(fmt.Errorf("the payload of %s cannot be read: the delivery was logged before hookd recorded where its record is kept", id))
	case errors.Is(err, replay.ErrPayloadMismatch):
		return Usage(fmt.Errorf("the payload of %s cannot be read: %w", id, err))
	case errors.Is(err, replay.ErrPayloadUnavailable):
		return fmt.Errorf("the payload of %s cannot be read now: Kafka did not answer in time; try again (%w)", id, err)
	}
	return fmt.Errorf("reading the payload of %s: %w", id, err)
}
