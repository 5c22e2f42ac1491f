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
