// Package ssrf owns hookd's server-side request forgery guard: the list of
// address classes a webhook may never be sent to and a net.Dialer Control
// function that checks the IP actually being dialled, after DNS resolution,
// so a name that resolves (or re-resolves, DNS rebinding) to a private or
// metadata address is refused at connect time. It never resolves names
// itself and never makes a connection.
package ssrf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrRefused is wrapped by every refusal; match it with errors.Is.
var ErrRefused = errors.New("destination refused by the SSRF guard")

// RefusedError names the refused address and its class.
type RefusedError struct {
	Addr  netip.Addr
	Class string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("destination %s refused: %s address", e.Addr, e.Class)
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

type rangeClass struct {
	prefix netip.Prefix
	class  string
}

func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// metadata lists cloud instance-metadata addresses; they are checked first
// so a refusal names them.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
}

var v4Ranges = []rangeClass{
	{p("0.0.0.0/8"), ClassUnspecified}, // "this network"
	{p("10.0.0.0/8"), ClassPrivate},
	{p("100.64.0.0/10"), ClassCGNAT},
	{p("127.0.0.0/8"), ClassLoopback},
	{p("169.254.0.0/16"), ClassLinkLocal},
	{p("172.16.0.0/12"), ClassPrivate},
	{p("192.0.0.0/24"), ClassReserved}, // IETF protocol assignments
	{p("192.0.2.0/24"), ClassDocumentation},
	{p("192.88.99.0/24"), ClassTunnel}, // 6to4 relay anycast
	{p("192.168.0.0/16"), ClassPrivate},
	{p("198.18.0.0/15"), ClassReserved}, // benchmarking
	{p("198.51.100.0/24"), ClassDocumentation},
	{p("203.0.113.0/24"), ClassDocumentation},
	{p("224.0.0.0/4"), ClassMulticast},
	{p("255.255.255.255/32"), ClassBroadcast},
	{p("240.0.0.0/4"), ClassReserved},
}

var v6Ranges = []rangeClass{
	{p("::/128"), ClassUnspecified},
	{p("::1/128"), ClassLoopback},
	{p("64:ff9b:1::/48"), ClassPrivate}, // local-use NAT64
	{p("100::/64"), ClassReserved},      // discard-only
	{p("2001::/32"), ClassTunnel},       // Teredo: embeds an obfuscated IPv4
	{p("2001:db8::/32"), ClassDocumentation},
	{p("3fff::/20"), ClassDocumentation},
	{p("fc00::/7"), ClassPrivate}, // unique local
	{p("fe80::/10"), ClassLinkLocal},
	{p("fec0::/10"), ClassPrivate}, // deprecated site-local
	{p("ff00::/8"), ClassMulticast},
}

// Embedding forms: the IPv4 address inside is checked as well.
var (
	nat64     = p("64:ff9b::/96")
	sixToFour = p("2002::/16")
	v4Compat  = p("::/96") // deprecated IPv4-compatible addresses
)

// Check returns the class of a disallowed address and false, or "" and true
// for an address a webhook may be sent to. IPv4-mapped, IPv4-compatible,
// NAT64 and 6to4 forms are judged by the IPv4 address they embed.
func Check(a netip.Addr) (class string, ok bool) {
	if !a.IsValid() {
		return ClassReserved, false
	}
	a = a.WithZone("")
	for _, m := range metadata {
		if a == m {
			return ClassMetadata, false
		}
	}
	if a.Is4In6() {
		return check4(a.Unmap())
	}
	if a.Is4() {
		return check4(a)
	}
	for _, r := range v6Ranges {
		if r.prefix.Contains(a) {
			return r.class, false
		}
	}
	b := a.As16()
	switch {
	case nat64.Contains(a), v4Compat.Contains(a):
		return check4(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
	case sixToFour.Contains(a):
		return check4(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
	}
	return "", true
}

func check4(a netip.Addr) (string, bool) {
	for _, m := range metadata {
		if a == m {
			return ClassMetadata, false
		}
	}
	for _, r := range v4Ranges {
		if r.prefix.Contains(a) {
			return r.class, false
		}
	}
	return "", true
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
		return &RefusedError{Class: ClassReserved}
	}
	if class, ok := Check(a); !ok {
		return &RefusedError{Addr: a, Class: class}
	}
	return nil
}

// Control is a net.Dialer Control function: it runs after resolution, just
// before connect(2), with the address really being dialled.
func (g Guard) Control(network, address string, _ syscall.RawConn) error {
	return g.CheckAddr(address)
}
