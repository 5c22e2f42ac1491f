// Package ssrf owns hookd's server-side request forgery guard: the list of
// address blocks a webhook may never be sent to (registry.go, from the IANA
// special-purpose registries), a net.Dialer Control function that checks
// the IP actually being dialled, after DNS resolution, so a name that
// resolves (or re-resolves, DNS rebinding) to a private or metadata address
// is refused at connect time, and CheckURL, the earlier check of an
// endpoint URL when it is created or changed. It never makes a connection;
// only CheckURL resolves names, through the resolver it is given.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package ssrf

import (
	"cmp"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// ErrRefused is wrapped by every refusal; match it with errors.Is.
var ErrRefused = errors.New("destination refused by the SSRF guard")

// RefusedError names the refused address and why.
type RefusedError struct {
	// Host is the URL's host name when the address came from resolving
	// it (CheckURL), or a name refused without resolving ("localhost").
	Host string
	// Addr is the refused address; invalid when a name was refused
	// without resolving it.
	Addr netip.Addr
	// Class is the coarse class (ClassPrivate, ...).
	Class string
	// What describes the block ("private", "link-local", ...) and Source
	// names its reference ("RFC 1918").
	What, Source string
	// Embedded is the refused IPv4 address an IPv6 Addr carries (NAT64,
	// 6to4, IPv4-compatible, ...), when that is the reason.
	Embedded netip.Addr
}

// Error reads "10.0.0.1 is a private address (RFC 1918)", "x.example
// resolves to 10.0.0.1, which is a private address (RFC 1918)",
// "64:ff9b::a00:1 embeds 10.0.0.1, a private address (RFC 1918)" or
// "localhost is a loopback name (RFC 6761)".
func (e *RefusedError) Error() string {
	what := cmp.Or(e.What, e.Class)
	kind := article(what) + " " + what
	ref := ""
	if e.Source != "" {
		ref = " (" + e.Source + ")"
	}
	if !e.Addr.IsValid() {
		if e.Host != "" {
			return e.Host + " is " + kind + " name" + ref
		}
		return "destination refused: " + kind + " address" + ref
	}
	verdict := "is " + kind + " address" + ref
	if e.Embedded.IsValid() {
		verdict = "embeds " + e.Embedded.String() + ", " + kind + " address" + ref
	}
	if e.Host != "" {
		return e.Host + " resolves to " + e.Addr.String() + ", which " + verdict
	}
	return e.Addr.String() + " " + verdict
}

func article(word string) string {
	w := strings.ToLower(word)
	if (strings.HasPrefix(w, "un") && !strings.HasPrefix(w, "uni")) || (w != "" && strings.ContainsRune("aeio", rune(w[0]))) {
		return "an"
	}
	return "a"
}

// Unwrap makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Address classes reported by Check.
const (
	ClassUnspecified   = "unspecified"
	ClassLoopback      = "loopback"
	ClassPrivate       = "private"
	ClassLinkLocal     = "link_local"
	ClassMetadata      = "metadata"
	ClassCGNAT         = "cgnat"
	ClassMulticast     = "multicast"
	ClassBroadcast     = "broadcast"
	ClassReserved      = "reserved"
	ClassDocumentation = "documentation"
	ClassTunnel        = "tunnel"
)

// Check returns the class of a disallowed address and false, or "" and true
// for an address a webhook may be sent to. IPv4-mapped, NAT64 and 6to4
// addresses are judged by the IPv4 address they embed.
func Check(a netip.Addr) (class string, ok bool) {
	if r := Explain(a); r != nil {
		return r.Class, false
	}
	return "", true
}

// Explain returns why a is refused, or nil when a webhook may be sent to it.
func Explain(a netip.Addr) *RefusedError {
	if !a.IsValid() {
		return &RefusedError{Class: ClassReserved, What: "invalid"}
	}
	a = a.WithZone("")
	if a.Is4In6() {
		return explain4(a.Unmap(), a)
	}
	if a.Is4() {
		return explain4(a, a)
	}
	if isMetadata(a) {
		return metadataRefusal(a)
	}
	for _, b := range v6Blocks {
		if !b.prefix.Contains(a) {
			continue
		}
		if b.embeds != nil {
			if r := explain4(b.embeds(a.As16()), a); r != nil {
				r.Embedded = b.embeds(a.As16())
				return r
			}
		}
		if b.class == "" {
			return nil
		}
		return &RefusedError{Addr: a, Class: b.class, What: b.what, Source: b.source}
	}
	if !globalUnicast.Contains(a) {
		return &RefusedError{Addr: a, Class: ClassReserved, What: "reserved", Source: "outside 2000::/3, IPv6 global unicast"}
	}
	return nil
}

func isMetadata(a netip.Addr) bool {
	for _, m := range metadata {
		if a == m {
			return true
		}
	}
	return false
}

func metadataRefusal(a netip.Addr) *RefusedError {
	return &RefusedError{Addr: a, Class: ClassMetadata, What: "cloud instance metadata", Source: "metadata service"}
}

// explain4 judges the IPv4 address v4; orig is the address as given (an
// IPv4-mapped one is reported as given).
func explain4(v4, orig netip.Addr) *RefusedError {
	if isMetadata(v4) {
		return metadataRefusal(orig)
	}
	for _, b := range v4Blocks {
		if b.prefix.Contains(v4) {
			return &RefusedError{Addr: orig, Class: b.class, What: b.what, Source: b.source}
		}
	}
	return nil
}

// Guard refuses connections to disallowed addresses.
type Guard struct {
	// AllowPrivate turns the guard off (development and tests only).
	AllowPrivate bool
}

// CheckAddr checks one dialled "ip:port" address.
func (g Guard) CheckAddr(address string) error {
	if g.AllowPrivate {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		// The dialler always passes a resolved IP; anything else is refused.
		return &RefusedError{Class: ClassReserved, What: "unresolved"}
	}
	if r := Explain(a); r != nil {
		return r
	}
	return nil
}

// Control is a net.Dialer Control function: it runs after resolution, just
// before connect(2), with the address really being dialled.
func (g Guard) Control(network, address string, _ syscall.RawConn) error {
	return g.CheckAddr(address)
}
