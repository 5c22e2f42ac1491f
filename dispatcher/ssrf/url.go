package ssrf

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Resolver looks up the addresses of a host name; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// LookupTimeout bounds the name lookup of CheckURL.
const LookupTimeout = 3 * time.Second

// CheckURL refuses an endpoint URL whose host is, or resolves to, an
// address Check refuses, with a *RefusedError (errors.Is ErrRefused). It
// is the early, friendly half of the guard, run when an endpoint is
// created or its URL changes; the dial-time Guard stays the enforcement
// point, because DNS answers change.
//
//   - An IP literal is judged as is (an IPv6 zone is ignored).
//   - "localhost" and names under ".localhost" are loopback without a
//     lookup (RFC 6761).
//   - Any other name is resolved with r (net.DefaultResolver when nil),
//     within LookupTimeout, and refused when any of its addresses is.
//   - A lookup that fails (no such host, timeout, no DNS at all) is not a
//     refusal: CheckURL returns nil. A name that does not resolve cannot be
//     dialled, the dial-time guard checks whatever it resolves to later,
//     and refusing would make creating endpoints depend on DNS being up
//     and on the receiver's DNS being published before its endpoint.
//
// A URL that does not parse or has no host is an error that does not wrap
// ErrRefused; validate the URL's syntax first (endpoint.ValidateURL).
func CheckURL(ctx context.Context, r Resolver, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("parsing url: %w", err)
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("url has no host")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if ref := Explain(a); ref != nil {
			return ref
		}
		return nil
	}
	if name := strings.TrimSuffix(strings.ToLower(host), "."); name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return &RefusedError{Host: host, Class: ClassLoopback, What: "loopback", Source: "RFC 6761"}
	}
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, LookupTimeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if ref := Explain(a); ref != nil {
			ref.Host = host
			return ref
		}
	}
	return nil
}
