package ssrf

import (
	"cmp"
	"net/netip"
	"slices"
)

// The blocks below are transcribed from two IANA registries:
//
//   - IANA IPv4 Special-Purpose Address Registry
//     (https://www.iana.org/assignments/iana-ipv4-special-registry/),
//   - IANA IPv6 Special-Purpose Address Registry
//     (https://www.iana.org/assignments/iana-ipv6-special-registry/),
//
// at the revisions that include, for IPv6, 100:0:0:1::/64 (Dummy IPv6
// Prefix, RFC 9780, registered 2025-04) and, for IPv4, 192.0.0.170/32 and
// 192.0.0.171/32 as updated by RFC 8880. They were transcribed without
// network access to iana.org, so the registries' "Last Updated" dates could
// not be read: re-check these tables against the live registries when
// reviewing this file (TestCheckTable has a row for every block).
//
// The rule: every entry of both registries is refused, globally reachable
// or not, except the two blocks that only wrap an IPv4 address
// (::ffff:0:0/96 IPv4-mapped and 64:ff9b::/96 NAT64), which are judged by
// the IPv4 address they wrap. The globally reachable entries (the anycast
// service addresses 192.0.0.9, 192.0.0.10, 2001:1::1..3, AMT, AS112, DETs)
// are refused too: an anycast destination is served by the nearest
// instance, which may sit inside the operator's own network, and no webhook
// receiver lives there. 6to4 (2002::/16) is judged by the IPv4 address it
// embeds, as its relays would reach it.
//
// Added to the registries' entries: IPv4 multicast 224.0.0.0/4 (IANA IPv4
// Multicast Address Space Registry), IPv6 multicast ff00::/8 and the
// deprecated site-local fec0::/10 (RFC 3879), the deprecated
// IPv4-compatible ::/96 and the SIIT IPv4-translated ::ffff:0:0:0/96
// (RFC 2765) forms, and, as a last rule, every IPv6 address outside
// 2000::/3: the only block of the IANA IPv6 Address Space registry
// allocated for global unicast, so whatever the special-purpose registry
// adds later outside it is refused already.

// block is one refused address block. A block with an embeds function
// carries an IPv4 address: a refused embedded address is reported as such;
// when class is "" the block itself is allowed and only the embedded
// address is judged.
type block struct {
	prefix netip.Prefix
	class  string
	// what is the adjective of the refusal message ("a private address").
	what string
	// source is the registry entry's reference.
	source string
	embeds func(b [16]byte) netip.Addr
}

func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// metadata lists cloud instance-metadata addresses; they are checked first
// so a refusal names them.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, ...
	netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud (legacy)
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
	netip.MustParseAddr("fd20:ce::254"),    // GCP metadata over IPv6
}

var v4Blocks = sortBlocks([]block{
	// IPv4 Special-Purpose Address Registry.
	{p("0.0.0.0/8"), ClassUnspecified, "this-network", "RFC 791", nil},
	{p("0.0.0.0/32"), ClassUnspecified, "this-host", "RFC 1122", nil},
	{p("10.0.0.0/8"), ClassPrivate, "private", "RFC 1918", nil},
	{p("100.64.0.0/10"), ClassCGNAT, "shared (carrier-grade NAT)", "RFC 6598", nil},
	{p("127.0.0.0/8"), ClassLoopback, "loopback", "RFC 1122", nil},
	{p("169.254.0.0/16"), ClassLinkLocal, "link-local", "RFC 3927", nil},
	{p("172.16.0.0/12"), ClassPrivate, "private", "RFC 1918", nil},
	{p("192.0.0.0/24"), ClassReserved, "IETF protocol assignment", "RFC 6890", nil},
	{p("192.0.0.0/29"), ClassReserved, "IPv4 service continuity", "RFC 7335", nil},
	{p("192.0.0.8/32"), ClassReserved, "IPv4 dummy", "RFC 7600", nil},
	{p("192.0.0.9/32"), ClassReserved, "PCP anycast", "RFC 7723", nil},
	{p("192.0.0.10/32"), ClassReserved, "TURN anycast", "RFC 8155", nil},
	{p("192.0.0.170/32"), ClassReserved, "NAT64/DNS64 discovery", "RFC 8880", nil},
	{p("192.0.0.171/32"), ClassReserved, "NAT64/DNS64 discovery", "RFC 8880", nil},
	{p("192.0.2.0/24"), ClassDocumentation, "documentation (TEST-NET-1)", "RFC 5737", nil},
	{p("192.31.196.0/24"), ClassReserved, "AS112 anycast", "RFC 7535", nil},
	{p("192.52.193.0/24"), ClassReserved, "AMT anycast", "RFC 7450", nil},
	{p("192.88.99.0/24"), ClassTunnel, "6to4 relay anycast (deprecated)", "RFC 7526", nil},
	{p("192.168.0.0/16"), ClassPrivate, "private", "RFC 1918", nil},
	{p("192.175.48.0/24"), ClassReserved, "AS112 anycast", "RFC 7534", nil},
	{p("198.18.0.0/15"), ClassReserved, "benchmarking", "RFC 2544", nil},
	{p("198.51.100.0/24"), ClassDocumentation, "documentation (TEST-NET-2)", "RFC 5737", nil},
	{p("203.0.113.0/24"), ClassDocumentation, "documentation (TEST-NET-3)", "RFC 5737", nil},
	{p("240.0.0.0/4"), ClassReserved, "reserved", "RFC 1112", nil},
	{p("255.255.255.255/32"), ClassBroadcast, "limited broadcast", "RFC 919", nil},
	// IPv4 Multicast Address Space Registry.
	{p("224.0.0.0/4"), ClassMulticast, "multicast", "RFC 5771", nil},
})

func last32(b [16]byte) netip.Addr { return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}) }

func sixToFour(b [16]byte) netip.Addr { return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}) }

var v6Blocks = sortBlocks([]block{
	// IPv6 Special-Purpose Address Registry. (::ffff:0:0/96, IPv4-mapped,
	// is unmapped and judged as IPv4 before these are consulted.)
	{p("::/128"), ClassUnspecified, "unspecified", "RFC 4291", nil},
	{p("::1/128"), ClassLoopback, "loopback", "RFC 4291", nil},
	{p("64:ff9b::/96"), "", "", "", last32}, // NAT64 well-known prefix, RFC 6052
	{p("64:ff9b:1::/48"), ClassPrivate, "local-use NAT64", "RFC 8215", nil},
	{p("100::/64"), ClassReserved, "discard-only", "RFC 6666", nil},
	{p("100:0:0:1::/64"), ClassReserved, "dummy", "RFC 9780", nil},
	{p("2001::/23"), ClassReserved, "IETF protocol assignment", "RFC 2928", nil},
	{p("2001::/32"), ClassTunnel, "Teredo", "RFC 4380", nil},
	{p("2001:1::1/128"), ClassReserved, "PCP anycast", "RFC 7723", nil},
	{p("2001:1::2/128"), ClassReserved, "TURN anycast", "RFC 8155", nil},
	{p("2001:1::3/128"), ClassReserved, "DNS-SD SRP anycast", "RFC 9665", nil},
	{p("2001:2::/48"), ClassReserved, "benchmarking", "RFC 5180", nil},
	{p("2001:3::/32"), ClassReserved, "AMT anycast", "RFC 7450", nil},
	{p("2001:4:112::/48"), ClassReserved, "AS112 anycast", "RFC 7535", nil},
	{p("2001:10::/28"), ClassReserved, "ORCHID (deprecated)", "RFC 4843", nil},
	{p("2001:20::/28"), ClassReserved, "ORCHIDv2", "RFC 7343", nil},
	{p("2001:30::/28"), ClassReserved, "drone remote ID (DET)", "RFC 9374", nil},
	{p("2001:db8::/32"), ClassDocumentation, "documentation", "RFC 3849", nil},
	{p("2002::/16"), "", "", "", sixToFour}, // 6to4, RFC 3056
	{p("2620:4f:8000::/48"), ClassReserved, "AS112 anycast", "RFC 7534", nil},
	{p("3fff::/20"), ClassDocumentation, "documentation", "RFC 9637", nil},
	{p("5f00::/16"), ClassReserved, "segment routing (SRv6) SID", "RFC 9602", nil},
	{p("fc00::/7"), ClassPrivate, "unique-local", "RFC 4193", nil},
	{p("fe80::/10"), ClassLinkLocal, "link-local", "RFC 4291", nil},
	// Not in the special-purpose registry.
	{p("::/96"), ClassReserved, "IPv4-compatible (deprecated)", "RFC 4291", last32},
	{p("::ffff:0:0:0/96"), ClassReserved, "IPv4-translated (SIIT)", "RFC 2765", last32},
	{p("fec0::/10"), ClassPrivate, "site-local (deprecated)", "RFC 3879", nil},
	{p("ff00::/8"), ClassMulticast, "multicast", "RFC 4291", nil},
})

// globalUnicast is the only IPv6 block IANA has allocated for global
// unicast (IANA IPv6 Address Space registry); everything outside it that
// no block above names is refused as reserved.
var globalUnicast = p("2000::/3")

// sortBlocks orders blocks most specific first, so the first block that
// contains an address is its registry entry.
func sortBlocks(bs []block) []block {
	slices.SortStableFunc(bs, func(a, b block) int { return cmp.Compare(b.prefix.Bits(), a.prefix.Bits()) })
	return bs
}
