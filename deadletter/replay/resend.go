package replay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/store"
)

// ErrDeliveryNotFound: no delivery with the id, or another account's.
var ErrDeliveryNotFound = errors.New("delivery not found")

// DeliveryResend asks to send one delivery again, whatever its state:
// the same webhook-id and body, attempt 1, a fresh timestamp and
// signature (hookctl deliveries resend, POST /v1/deliveries/{id}/resend,
// the portal's Resend).
type DeliveryResend struct {
	// Account is the account asking: only its deliveries are resent, and
	// the audit row is its own. Empty for an operator (any account's
	// delivery; the row is the operators').
	Account    string
	DeliveryID string
	// Actor and Reason are recorded in the audit row; both required.
	Actor, Reason string
	// Force sends to a disabled endpoint too.
	Force bool
	// PayloadTimeout bounds reading the payload from Kafka.
	// Defaults to DefaultPayloadTimeout.
	PayloadTimeout time.Duration
}

// resendFilter is the filter column of a delivery resend's audit row
// ("endpoint" and "account" as a replay's, so that listings by endpoint
// and account find it).
type resendFilter struct {
	EndpointID string `json:"endpoint"`
	Account    string `json:"account"`
	DeliveryID string `json:"delivery_id"`
	EventID    string `json:"event_id"`
}

// ResendDelivery resends one delivery through the deliveries topic, as a
// replay does, audited in webhooks.replays (kind KindDelivery, one row per
// resend: resending twice sends twice) and in webhooks.replay_sends. The
// payload is read from Kafka (ReadPayload): a delivery whose record is no
// longer retained cannot be resent (ErrPayloadExpired, ...). It returns
// the audit row as saved; a failed produce leaves it failed, with its
// error.
func ResendDelivery(ctx context.Context, deps Deps, req DeliveryResend) (store.Replay, error) {
	deps = withLogger(deps)
	if err := req.validate(); err != nil {
		return store.Replay{}, err
	}
	scope := req.Account
	if scope == "" {
		scope = store.AnyAccount
	}
	d, err := deps.Store.GetDelivery(ctx, scope, req.DeliveryID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && req.Account != "" && d.Account != req.Account) {
		return store.Replay{}, fmt.Errorf("%w: %s", ErrDeliveryNotFound, req.DeliveryID)
	}
	if err != nil {
		return store.Replay{}, err
	}
	if err := checkResendEndpoint(ctx, deps, d, req.Force); err != nil {
		return store.Replay{}, err
	}
	p, err := ReadPayload(ctx, deps, d, req.PayloadTimeout)
	if err != nil {
		return store.Replay{}, fmt.Errorf("reading the payload of %s: %w", d.ID, err)
	}
	filter, _ := json.Marshal(resendFilter{EndpointID: d.EndpointID, Account: d.Account, DeliveryID: d.ID, EventID: d.EventID})
	var b [10]byte
	_, _ = rand.Read(b[:])
	row, _, err := deps.Store.CreateReplay(ctx, store.Replay{ID: "rpl_dv_" + hex.EncodeToString(b[:]), Kind: KindDelivery,
		Actor: req.Actor, Reason: req.Reason, Account: req.Account, Filter: filter, Matched: 1})
	if err != nil {
		return store.Replay{}, err
	}
	return finishResend(ctx, deps, row, p, d)
}

func (req *DeliveryResend) validate() error {
	switch {
	case req.DeliveryID == "":
		return fmt.Errorf("%w: a delivery id is required", ErrInvalid)
	case req.Reason == "":
		return fmt.Errorf("%w: a reason is required (--reason)", ErrInvalid)
	case req.Actor == "":
		return fmt.Errorf("%w: an actor is required (--actor)", ErrInvalid)
	}
	if err := checkText("reason", req.Reason, MaxReasonLen); err != nil {
		return err
	}
	return checkText("actor", req.Actor, MaxActorLen)
}

// checkResendEndpoint refuses a delivery whose endpoint is gone (or no
// longer its account's), or disabled without force.
func checkResendEndpoint(ctx context.Context, deps Deps, d store.Delivery, force bool) error {
	ep, err := deps.Store.GetEndpoint(ctx, d.EndpointID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && ep.Account != d.Account) {
		return fmt.Errorf("%w: %s (deleted)", ErrEndpointNotFound, d.EndpointID)
	}
	if err != nil {
		return err
	}
	if !ep.Active() && !force {
		return fmt.Errorf("%w: %s is disabled (%s); enable it first, or pass --force to resend to it anyway",
			ErrEndpointDisabled, ep.ID, ep.DisabledReason)
	}
	return nil
}

// finishResend produces the fresh record, records the send and closes
// the audit row.
func finishResend(ctx context.Context, deps Deps, row store.Replay, p Payload, d store.Delivery) (store.Replay, error) {
	fresh := *p.Delivery
	fresh.Attempt = 1
	fresh.FirstAttempt, fresh.DueAt = time.Time{}, time.Time{}
	fresh.LastStatus, fresh.LastError, fresh.ClientErrors, fresh.Deferrals = 0, "", 0, 0
	fresh.ReplayID = row.ID
	sendErr := produceOne(ctx, deps, fresh.Record(deps.Names.Deliveries))
	if sendErr == nil {
		sendErr = deps.Store.RecordReplaySends(ctx, row.Account, row.ID,
			[]store.ReplaySend{{Account: d.Account, DeliveryID: d.ID, EndpointID: d.EndpointID}})
	}
	u := store.ReplayUpdate{Account: row.Account, ID: row.ID, Matched: 1, Replayed: 1, Status: store.ReplayDone, Progress: []byte("{}")}
	if sendErr != nil {
		u.Replayed, u.Status, u.Error = 0, store.ReplayFailed, sendErr.Error()
	}
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := deps.Store.UpdateReplay(saveCtx, u); err != nil && sendErr == nil {
		sendErr = err
	}
	if got, err := deps.Store.GetAccountReplay(saveCtx, row.Account, row.ID); err == nil {
		row = got
	}
	return row, sendErr
}

// produceOne produces rec and waits for the broker's acknowledgement.
func produceOne(ctx context.Context, deps Deps, rec *kgo.Record) error {
	cl, err := kgo.NewClient(deps.KafkaOpts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, produceStall)
	defer cancel()
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("producing the resent delivery: %w", kafkaErr(err))
	}
	return nil
}
