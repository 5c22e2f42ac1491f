package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
)

// EndpointsResendCmd re-delivers what an endpoint missed. It is registered
// under `hookctl endpoints` (EndpointsCmd) but lives here, with the replay
// commands it shares its engine with.
type EndpointsResendCmd struct {
	ID     string `arg:"" help:"Endpoint id."`
	Since  string `name:"since" required:"" help:"Resend what was dead-lettered at or after this time: RFC 3339 or a duration ago (24h, 3d)."`
	Until  string `name:"until" help:"... and before this time (default: now)."`
	Reason string `name:"reason" help:"Why, for the audit log. Defaults to \"resend to <id> since <since>\"."`
	ReplayFlags
}

// Run implements `hookctl endpoints resend`.
func (c *EndpointsResendCmd) Run(ctx context.Context, g *Globals) error {
	now := time.Now()
	since, err := replay.ParseTime(c.Since, now)
	if err != nil {
		return Usage(fmt.Errorf("--since: %w", err))
	}
	if since.IsZero() {
		return Usage(errors.New("--since: required"))
	}
	until, err := replay.ParseTime(c.Until, now)
	if err != nil {
		return Usage(fmt.Errorf("--until: %w", err))
	}
	reason := c.Reason
	if reason == "" {
		reason = "resend to " + c.ID + " since " + c.Since
	}
	f := replay.Filter{EndpointID: c.ID, Since: since, Until: until}
	if err := f.Validate(); err != nil {
		return Usage(err)
	}
	req := replay.Request{Kind: replay.KindResend, ID: c.ReplayID, Actor: c.actor(), Reason: reason, Filter: f,
		SinceSpec: c.Since, UntilSpec: c.Until}
	return runReplay(ctx, g, req, c.ReplayFlags)
}

// DeliveriesResendCmd sends one delivery again, whatever its state. It is
// registered under `hookctl deliveries` (DeliveriesCmd).
type DeliveriesResendCmd struct {
	ID     string `arg:"" help:"Delivery id (dlv_...)."`
	Reason string `name:"reason" help:"Why, for the audit log. Defaults to \"resend of delivery <id>\"."`
	Actor  string `name:"actor" env:"HOOKD_ACTOR" help:"Who resends, for the audit log. Defaults to the OS user."`
	Force  bool   `name:"force" help:"Resend to a disabled endpoint too."`
}

// Run implements `hookctl deliveries resend`.
func (c *DeliveriesResendCmd) Run(ctx context.Context, g *Globals) error {
	reason := c.Reason
	if reason == "" {
		reason = "resend of delivery " + c.ID
	}
	deps, done, err := replayDeps(ctx, g, true)
	if err != nil {
		return err
	}
	defer done()
	row, err := replay.ResendDelivery(ctx, deps, replay.DeliveryResend{DeliveryID: c.ID,
		Actor: ReplayFlags{Actor: c.Actor}.actor(), Reason: reason, Force: c.Force})
	switch {
	case errors.Is(err, replay.ErrDeliveryNotFound), errors.Is(err, replay.ErrPayloadExpired),
		errors.Is(err, replay.ErrPayloadUnknown), errors.Is(err, replay.ErrPayloadMismatch):
		return Usage(err)
	case err != nil && row.ID != "":
		return fmt.Errorf("resend %s failed: %w", row.ID, err)
	case err != nil:
		return replayError(err)
	}
	if g.JSON() {
		return g.PrintJSON(row)
	}
	fmt.Fprintf(g.Out(), "resent %s as %s: same webhook-id, a fresh timestamp and signature (hookctl deliveries show %s follows it)\n",
		c.ID, row.ID, c.ID)
	return nil
}
