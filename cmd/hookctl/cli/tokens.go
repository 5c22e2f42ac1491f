package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// TokensCmd groups the API token commands.
type TokensCmd struct {
	Create TokensCreateCmd `cmd:"" help:"Create an API token for one account; prints it once."`
	List   TokensListCmd   `cmd:"" help:"List API tokens (never their values)."`
	Revoke TokensRevokeCmd `cmd:"" help:"Revoke an API token."`
}

// TokensCreateCmd creates a token.
type TokensCreateCmd struct {
	Account     string `name:"account" required:"" help:"The account the token sees and acts on (and no other)."`
	Description string `name:"description" help:"Free text, e.g. who holds it."`
}

// Run implements `hookctl tokens create`.
func (c *TokensCreateCmd) Run(ctx context.Context, g *Globals) error {
	if err := endpoint.ValidateAccount(c.Account); err != nil {
		return Usage(err)
	}
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	t, secret, err := st.CreateAPIToken(ctx, c.Account, c.Description)
	if err != nil {
		return err
	}
	if g.JSON() {
		return g.PrintJSON(struct {
			store.APIToken
			Token string `json:"token"`
		}{t, secret})
	}
	fmt.Fprintf(g.Out(), "token %s for account %s\n\n%s\n\nshown once: store it now (only its SHA-256 is kept). Use it as: Authorization: Bearer <token>\n", t.ID, t.Account, secret)
	return nil
}

// TokensListCmd lists tokens.
type TokensListCmd struct {
	Account string `name:"account" help:"Only this account's tokens."`
}

// Run implements `hookctl tokens list`.
func (c *TokensListCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	ts, err := st.ListAPITokens(ctx, c.Account)
	if err != nil {
		return err
	}
	if g.JSON() {
		return g.PrintJSON(ts)
	}
	tw := g.Table()
	fmt.Fprintln(tw, "ID\tACCOUNT\tCREATED\tREVOKED\tDESCRIPTION")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.Account, fmtTime(t.CreatedAt), fmtTimePtr(t.RevokedAt), dash(t.Description))
	}
	return tw.Flush()
}

// TokensRevokeCmd revokes a token.
type TokensRevokeCmd struct {
	ID string `arg:"" help:"Token id (tok_...)."`
}

// Run implements `hookctl tokens revoke`.
func (c *TokensRevokeCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.RevokeAPIToken(ctx, c.ID); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Usage(err)
		}
		return err
	}
	if g.JSON() {
		return g.PrintJSON(map[string]any{"id": c.ID, "revoked": true})
	}
	fmt.Fprintf(g.Out(), "revoked token %s\n", c.ID)
	return nil
}
