package ssrf

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkTable has the first and the last address of every block, and the
// addresses just outside it where they are not another block's. what is
// the block's description ("" for allowed addresses).
var checkTable = []struct {
	addr, class, what string
}{
	// IPv4 Special-Purpose Address Registry, in its order.
	{"0.0.0.0", ClassUnspecified, "this-host"},
	{"0.0.0.1", ClassUnspecified, "this-network"},
	{"0.255.255.255", ClassUnspecified, "this-network"},
	{"1.0.0.0", "", ""},
	{"9.255.255.255", "", ""},
	{"10.0.0.0", ClassPrivate, "private"},
	{"10.255.255.255", ClassPrivate, "private"},
	{"11.0.0.0", "", ""},
	{"100.63.255.255", "", ""},
	{"100.64.0.0", ClassCGNAT, "shared (carrier-grade NAT)"},
	{"100.127.255.255", ClassCGNAT, "shared (carrier-grade NAT)"},
	{"100.128.0.0", "", ""},
	{"126.255.255.255", "", ""},
	{"127.0.0.0", ClassLoopback, "loopback"},
	{"127.0.0.1", ClassLoopback, "loopback"},
	{"127.255.255.255", ClassLoopback, "loopback"},
	{"128.0.0.0", "", ""},
	{"169.253.255.255", "", ""},
	{"169.254.0.0", ClassLinkLocal, "link-local"},
	{"169.254.255.255", ClassLinkLocal, "link-local"},
	{"169.255.0.0", "", ""},
	{"172.15.255.255", "", ""},
	{"172.16.0.0", ClassPrivate, "private"},
	{"172.31.255.255", ClassPrivate, "private"},
	{"172.32.0.0", "", ""},
	{"191.255.255.255", "", ""},
	{"192.0.0.0", ClassReserved, "IPv4 service continuity"},
	{"192.0.0.7", ClassReserved, "IPv4 service continuity"},
	{"192.0.0.8", ClassReserved, "IPv4 dummy"},
	{"192.0.0.9", ClassReserved, "PCP anycast"},
	{"192.0.0.10", ClassReserved, "TURN anycast"},
	{"192.0.0.11", ClassReserved, "IETF protocol assignment"},
	{"192.0.0.169", ClassReserved, "IETF protocol assignment"},
	{"192.0.0.170", ClassReserved, "NAT64/DNS64 discovery"},
	{"192.0.0.171", ClassReserved, "NAT64/DNS64 discovery"},
	{"192.0.0.172", ClassReserved, "IETF protocol assignment"},
	{"192.0.0.255", ClassReserved, "IETF protocol assignment"},
	{"192.0.1.255", "", ""},
	{"192.0.2.0", ClassDocumentation, "documentation (TEST-NET-1)"},
	{"192.0.2.255", ClassDocumentation, "documentation (TEST-NET-1)"},
	{"192.0.3.0", "", ""},
	{"192.31.195.255", "", ""},
	{"192.31.196.0", ClassReserved, "AS112 anycast"},
	{"192.31.196.255", ClassReserved, "AS112 anycast"},
	{"192.31.197.0", "", ""},
	{"192.52.192.255", "", ""},
	{"192.52.193.0", ClassReserved, "AMT anycast"},
	{"192.52.193.255", ClassReserved, "AMT anycast"},
	{"192.52.194.0", "", ""},
	{"192.88.98.255", "", ""},
	{"192.88.99.0", ClassTunnel, "6to4 relay anycast (deprecated)"},
	{"192.88.99.2", ClassTunnel, "6to4 relay anycast (deprecated)"},
	{"192.88.99.255", ClassTunnel, "6to4 relay anycast (deprecated)"},
	{"192.88.100.0", "", ""},
	{"192.167.255.255", "", ""},
	{"192.168.0.0", ClassPrivate, "private"},
	{"192.168.255.255", ClassPrivate, "private"},
	{"192.169.0.0", "", ""},
	{"192.175.47.255", "", ""},
	{"192.175.48.0", ClassReserved, "AS112 anycast"},
	{"192.175.48.255", ClassReserved, "AS112 anycast"},
	{"192.175.49.0", "", ""},
	{"198.17.255.255", "", ""},
	{"198.18.0.0", ClassReserved, "benchmarking"},
	{"198.19.255.255", ClassReserved, "benchmarking"},
	{"198.20.0.0", "", ""},
	{"198.51.99.255", "", ""},
	{"198.51.100.0", ClassDocumentation, "documentation (TEST-NET-2)"},
	{"198.51.100.255", ClassDocumentation, "documentation (TEST-NET-2)"},
	{"198.51.101.0", "", ""},
	{"203.0.112.255", "", ""},
	{"203.0.113.0", ClassDocumentation, "documentation (TEST-NET-3)"},
	{"203.0.113.255", ClassDocumentation, "documentation (TEST-NET-3)"},
	{"203.0.114.0", "", ""},
	{"223.255.255.255", "", ""},
	{"224.0.0.0", ClassMulticast, "multicast"},
	{"239.255.255.255", ClassMulticast, "multicast"},
	{"240.0.0.0", ClassReserved, "reserved"},
	{"255.255.255.254", ClassReserved, "reserved"},
	{"255.255.255.255", ClassBroadcast, "limited broadcast"},
	// Cloud metadata.
	{"169.254.169.254", ClassMetadata, "cloud instance metadata"},
	{"169.254.170.2", ClassMetadata, "cloud instance metadata"},
	{"100.100.100.200", ClassMetadata, "cloud instance metadata"},
	{"192.0.0.192", ClassMetadata, "cloud instance metadata"},
	{"fd00:ec2::254", ClassMetadata, "cloud instance metadata"},
	{"fd20:ce::254", ClassMetadata, "cloud instance metadata"},
	{"::ffff:169.254.169.254", ClassMetadata, "cloud instance metadata"},

	// IPv6 Special-Purpose Address Registry, in its order.
	{"::1", ClassLoopback, "loopback"},
	{"::", ClassUnspecified, "unspecified"},
	// IPv4-mapped: judged as the IPv4 address.
	{"::ffff:0.0.0.0", ClassUnspecified, "this-host"},
	{"::ffff:8.8.8.8", "", ""},
	{"::ffff:10.1.2.3", ClassPrivate, "private"},
	{"::ffff:127.0.0.1", ClassLoopback, "loopback"},
	{"::ffff:255.255.255.255", ClassBroadcast, "limited broadcast"},
	// NAT64 well-known prefix: judged by the IPv4 address.
	{"64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "reserved"},
	{"64:ff9b::", ClassUnspecified, "this-host"},
	{"64:ff9b::808:808", "", ""},
	{"64:ff9b::7f00:1", ClassLoopback, "loopback"},
	{"64:ff9b::a9fe:a9fe", ClassMetadata, "cloud instance metadata"},
	{"64:ff9b::a00:1", ClassPrivate, "private"},
	{"64:ff9b::ffff:ffff", ClassBroadcast, "limited broadcast"},
	{"64:ff9b::1:0:0", ClassReserved, "reserved"},
	{"64:ff9b:1::", ClassPrivate, "local-use NAT64"},
	{"64:ff9b:1::808:808", ClassPrivate, "local-use NAT64"},
	{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", ClassPrivate, "local-use NAT64"},
	{"64:ff9b:2::", ClassReserved, "reserved"},
	{"100::", ClassReserved, "discard-only"},
	{"100::ffff:ffff:ffff:ffff", ClassReserved, "discard-only"},
	{"100:0:0:1::", ClassReserved, "dummy"},
	{"100:0:0:1:ffff:ffff:ffff:ffff", ClassReserved, "dummy"},
	{"100:0:0:2::", ClassReserved, "reserved"},
	{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", ""},
	{"2001::", ClassTunnel, "Teredo"},
	{"2001::1", ClassTunnel, "Teredo"},
	{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", ClassTunnel, "Teredo"},
	{"2001:1::", ClassReserved, "IETF protocol assignment"},
	{"2001:1::1", ClassReserved, "PCP anycast"},
	{"2001:1::2", ClassReserved, "TURN anycast"},
	{"2001:1::3", ClassReserved, "DNS-SD SRP anycast"},
	{"2001:1::4", ClassReserved, "IETF protocol assignment"},
	{"2001:2::", ClassReserved, "benchmarking"},
	{"2001:2:0:ffff:ffff:ffff:ffff:ffff", ClassReserved, "benchmarking"},
	{"2001:2:1::", ClassReserved, "IETF protocol assignment"},
	{"2001:3::", ClassReserved, "AMT anycast"},
	{"2001:3:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "AMT anycast"},
	{"2001:4:111:ffff:ffff:ffff:ffff:ffff", ClassReserved, "IETF protocol assignment"},
	{"2001:4:112::", ClassReserved, "AS112 anycast"},
	{"2001:4:112:ffff:ffff:ffff:ffff:ffff", ClassReserved, "AS112 anycast"},
	{"2001:4:113::", ClassReserved, "IETF protocol assignment"},
	{"2001:f:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "IETF protocol assignment"},
	{"2001:10::", ClassReserved, "ORCHID (deprecated)"},
	{"2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "ORCHID (deprecated)"},
	{"2001:20::", ClassReserved, "ORCHIDv2"},
	{"2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "ORCHIDv2"},
	{"2001:30::", ClassReserved, "drone remote ID (DET)"},
	{"2001:3f:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "drone remote ID (DET)"},
	{"2001:40::", ClassReserved, "IETF protocol assignment"},
	{"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "IETF protocol assignment"},
	{"2001:200::", "", ""},
	{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "", ""},
	{"2001:db8::", ClassDocumentation, "documentation"},
	{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", ClassDocumentation, "documentation"},
	{"2001:db9::", "", ""},
	{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", ""},
	// 6to4: judged by the IPv4 address.
	{"2002::", ClassUnspecified, "this-host"},
	{"2002:808:808::1", "", ""},
	{"2002:7f00:1::1", ClassLoopback, "loopback"},
	{"2002:a00:1::", ClassPrivate, "private"},
	{"2002:a9fe:a9fe::", ClassMetadata, "cloud instance metadata"},
	{"2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassBroadcast, "limited broadcast"},
	{"2003::", "", ""},
	{"2620:4f:7fff:ffff:ffff:ffff:ffff:ffff", "", ""},
	{"2620:4f:8000::", ClassReserved, "AS112 anycast"},
	{"2620:4f:8000:ffff:ffff:ffff:ffff:ffff", ClassReserved, "AS112 anycast"},
	{"2620:4f:8001::", "", ""},
	{"2606:4700:4700::1111", "", ""},
	{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", ""},
	{"3fff::", ClassDocumentation, "documentation"},
	{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", ClassDocumentation, "documentation"},
	{"3fff:1000::", "", ""},
	{"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "", ""},
	{"4000::", ClassReserved, "reserved"},
	{"5eff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "reserved"},
	{"5f00::", ClassReserved, "segment routing (SRv6) SID"},
	{"5f00:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "segment routing (SRv6) SID"},
	{"5f01::", ClassReserved, "reserved"},
	{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "reserved"},
	{"fc00::", ClassPrivate, "unique-local"},
	{"fd12:3456::1", ClassPrivate, "unique-local"},
	{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPrivate, "unique-local"},
	{"fe00::", ClassReserved, "reserved"},
	{"fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassReserved, "reserved"},
	{"fe80::", ClassLinkLocal, "link-local"},
	{"fe80::1%eth0", ClassLinkLocal, "link-local"},
	{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassLinkLocal, "link-local"},

	// Outside the special-purpose registry.
	{"::0.0.0.2", ClassUnspecified, "this-network"},
	{"::8.8.8.8", ClassReserved, "IPv4-compatible (deprecated)"},
	{"::127.0.0.1", ClassLoopback, "loopback"},
	{"::ffff:ffff", ClassBroadcast, "limited broadcast"},
	{"::1:0:0", ClassReserved, "reserved"},
	{"::fffe:ffff:ffff:ffff", ClassReserved, "reserved"},
	{"::ffff:0:0:0", ClassUnspecified, "this-host"},
	{"::ffff:0:808:808", ClassReserved, "IPv4-translated (SIIT)"},
	{"::ffff:0:a9fe:a9fe", ClassMetadata, "cloud instance metadata"},
	{"::ffff:0:a00:1", ClassPrivate, "private"},
	{"::ffff:0:ffff:fffe", ClassReserved, "reserved"},
	{"::ffff:0:ffff:ffff", ClassBroadcast, "limited broadcast"},
	{"::ffff:1:0:0", ClassReserved, "reserved"},
	{"fec0::", ClassPrivate, "site-local (deprecated)"},
	{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassPrivate, "site-local (deprecated)"},
	{"ff00::", ClassMulticast, "multicast"},
	{"ff02::1", ClassMulticast, "multicast"},
	{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ClassMulticast, "multicast"},
}

func TestCheckTable(t *testing.T) {
	t.Parallel()
	for _, tc := range checkTable {
		a := netip.MustParseAddr(tc.addr)
		class, ok := Check(a)
		require.Equal(t, tc.class == "", ok, "%s", tc.addr)
		require.Equal(t, tc.class, class, "%s", tc.addr)
		if r := Explain(a); r != nil {
			require.Equal(t, tc.what, r.What, "%s", tc.addr)
		}
	}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Every block's first and last address is a row of checkTable.
func TestCheckTableCoversEveryBlock(t *testing.T) {
	t.Parallel()
	rows := map[netip.Addr]bool{}
	for _, tc := range checkTable {
		rows[netip.MustParseAddr(tc.addr).WithZone("")] = true
	}
	blocks := append(append([]block(nil), v4Blocks...), v6Blocks...)
	for _, b := range blocks {
		first, last := b.prefix.Masked().Addr(), lastAddr(b.prefix)
		require.True(t, rows[first], "no row for the first address %s of %s", first, b.prefix)
		require.True(t, rows[last], "no row for the last address %s of %s", last, b.prefix)
	}
	for _, m := range metadata {
		require.True(t, rows[m], "no row for metadata address %s", m)
	}
}

func TestRefusedErrorMessages(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"10.0.0.1":           "10.0.0.1 is a private address (RFC 1918)",
		"::ffff:10.0.0.1":    "::ffff:10.0.0.1 is a private address (RFC 1918)",
		"64:ff9b::a00:1":     "64:ff9b::a00:1 embeds 10.0.0.1, a private address (RFC 1918)",
		"169.254.169.254":    "169.254.169.254 is a cloud instance metadata address (metadata service)",
		"::ffff:0:a9fe:a9fe": "::ffff:0:a9fe:a9fe embeds 169.254.169.254, a cloud instance metadata address (metadata service)",
		"2001:2::1":          "2001:2::1 is a benchmarking address (RFC 5180)",
		"192.0.0.9":          "192.0.0.9 is a PCP anycast address (RFC 7723)",
		"5f00::1":            "5f00::1 is a segment routing (SRv6) SID address (RFC 9602)",
		"::":                 ":: is an unspecified address (RFC 4291)",
		"4000::1":            "4000::1 is a reserved address (outside 2000::/3, IPv6 global unicast)",
	} {
		require.Equal(t, want, Explain(netip.MustParseAddr(addr)).Error(), addr)
	}
	r := Explain(netip.MustParseAddr("10.0.0.1"))
	r.Host = "x.example"
	require.Equal(t, "x.example resolves to 10.0.0.1, which is a private address (RFC 1918)", r.Error())
	require.Equal(t, "destination refused: an unresolved address", (&RefusedError{Class: ClassReserved, What: "unresolved"}).Error())
	require.Equal(t, "destination refused: a loopback address", (&RefusedError{Class: ClassLoopback}).Error())
}
