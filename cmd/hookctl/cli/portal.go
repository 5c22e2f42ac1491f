package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// PortalCmd groups the delivery portal commands.
type PortalCmd struct {
	Link PortalLinkCmd `cmd:"" help:"Create a one-time link that opens the delivery portal (/portal/) for one account; prints it once."`
}

// PortalLinkCmd creates a portal link.
type PortalLinkCmd struct {
	Account  string        `name:"account" required:"" help:"The account the link opens (and no other)."`
	Endpoint string        `name:"endpoint" help:"Limit the link to this endpoint of the account."`
	TTL      time.Duration `name:"ttl" default:"1h" help:"How long the link can be opened, 1m to 24h. It works once."`
	Manage   bool          `name:"manage" help:"Allow editing endpoints, rotating secrets, test events and replays; without it the link is read-only."`
	BaseURL  string        `name:"base-url" default:"http://127.0.0.1:8080" env:"HOOKD_PORTAL_BASE_URL" help:"Where the person reaches hookd's --listen (the printed link starts with it)."`
}

// Run implements `hookctl portal link`.
func (c *PortalLinkCmd) Run(ctx context.Context, g *Globals) error {
	if err := endpoint.ValidateAccount(c.Account); err != nil {
		return Usage(err)
	}
	if c.TTL < time.Minute || c.TTL > store.MaxPortalLinkTTL {
		return Usage(fmt.Errorf("--ttl: must be 1m..%s, got %s", store.MaxPortalLinkTTL, c.TTL))
	}
	base := strings.TrimSuffix(c.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return Usage(fmt.Errorf("--base-url: %q must start with http:// or https://", c.BaseURL))
	}
	level := store.PortalRead
	if c.Manage {
		level = store.PortalManage
	}
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	l, token, err := st.CreatePortalLink(ctx, store.CreatePortalLinkParams{Account: c.Account, EndpointID: c.Endpoint,
		Level: level, CreatedBy: "hookctl", TTL: c.TTL})
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrInvalidLink) {
		return Usage(err)
	}
	if err != nil {
		return err
	}
	link := base + "/portal/login/" + token
	if g.JSON() {
		return g.PrintJSON(struct {
			store.PortalLink
			URL string `json:"url"`
		}{l, link})
	}
	scope := "account " + l.Account
	if l.EndpointID != "" {
		scope += ", endpoint " + l.EndpointID
	}
	access := "read-only"
	if c.Manage {
		access = "manage"
	}
	fmt.Fprintf(g.Out(), "portal link %s for %s (%s), expires %s\n\n%s\n\nshown once, works once: send it to the person now (only its SHA-256 is kept)\n",
		l.ID, scope, access, fmtTime(l.ExpiresAt), link)
	return nil
}
