package api

import (
	"context"
	"errors"
	"fmt"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/endpoint"
)

// CheckNewEndpoint applies the rules every new endpoint meets, whoever
// creates it (POST /v1/endpoints, the portal's New endpoint form): its URL
// normalised to the host as a client dials it (what the address check
// judges and the store keeps), the endpoint valid (endpoint.Validate), at
// least one event type (no silent "everything"), and, unless
// allowPrivate, a destination that is not, and does not resolve to, a
// private or special-purpose address. A failed DNS lookup is accepted
// (ssrf.CheckURL): the dispatcher's dial-time guard still applies. Every
// error it returns is the caller's to fix, its text the message to show.
func CheckNewEndpoint(ctx context.Context, resolver ssrf.Resolver, allowPrivate bool, e *endpoint.Endpoint) error {
	if norm, err := endpoint.NormalizeURL(e.URL); err == nil {
		e.URL = norm // Validate reports a bad URL below
	}
	if err := e.Validate(); err != nil {
		return err
	}
	if !allowPrivate {
		if err := ssrf.CheckURL(ctx, resolver, e.URL); err != nil {
			return fmt.Errorf("url: %w", err) // wraps ssrf.ErrRefused for a private destination
		}
	}
	if len(e.EventTypes) == 0 {
		return errors.New(`event_types: required: the event types to receive, or ["*"] for all`)
	}
	return nil
}
