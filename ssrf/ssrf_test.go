package ssrf_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/ssrf"
)

func TestCheckTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr  string
		class string // "" means allowed
	}{
		// Allowed public addresses.
		{"93.184.216.34", ""},
		{"8.8.8.8", ""},
		{"2606:4700:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},   // IPv4-mapped public
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
		// Unspecified.
		{"0.0.0.0", ssrf.ClassUnspecified},
		{"0.1.2.3", ssrf.ClassUnspecified},
		{"::", ssrf.ClassUnspecified},
		// Loopback.
		{"127.0.0.1", ssrf.ClassLoopback},
		{"127.255.255.254", ssrf.ClassLoopback},
		{"::1", ssrf.ClassLoopback},
		// Private.
		{"10.0.0.1", ssrf.ClassPrivate},
		{"172.16.5.4", ssrf.ClassPrivate},
		{"172.31.255.255", ssrf.ClassPrivate},
		{"192.168.1.1", ssrf.ClassPrivate},
		{"fd12:3456::1", ssrf.ClassPrivate},
		{"fc00::1", ssrf.ClassPrivate},
		// Link-local and metadata.
		{"169.254.1.1", ssrf.ClassLinkLocal},
		{"fe80::1", ssrf.ClassLinkLocal},
		{"fe80::1%eth0", ssrf.ClassLinkLocal},
		{"169.254.169.254", ssrf.ClassMetadata},
		{"fd00:ec2::254", ssrf.ClassMetadata},
		{"100.100.100.200", ssrf.ClassMetadata},
		// CGNAT.
		{"100.64.0.1", ssrf.ClassCGNAT},
		{"100.127.255.254", ssrf.ClassCGNAT},
		// Multicast and broadcast.
		{"224.0.0.1", ssrf.ClassMulticast},
		{"239.255.255.250", ssrf.ClassMulticast},
		{"ff02::1", ssrf.ClassMulticast},
		{"255.255.255.255", ssrf.ClassBroadcast},
		{"240.0.0.1", ssrf.ClassReserved},
		// Embedded IPv4 forms of forbidden addresses.
		{"::ffff:127.0.0.1", ssrf.ClassLoopback},
		{"::ffff:169.254.169.254", ssrf.ClassMetadata},
		{"::ffff:10.1.2.3", ssrf.ClassPrivate},
		{"64:ff9b::7f00:1", ssrf.ClassLoopback},    // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", ssrf.ClassMetadata}, // NAT64 of 169.254.169.254
		{"64:ff9b:1::1", ssrf.ClassPrivate},        // local-use NAT64
		{"2002:7f00:1::1", ssrf.ClassLoopback},     // 6to4 of 127.0.0.1
		{"2002:a00:1::", ssrf.ClassPrivate},        // 6to4 of 10.0.0.1
		{"::127.0.0.1", ssrf.ClassLoopback},        // IPv4-compatible
		{"2001::1", ssrf.ClassTunnel},              // Teredo
		// Documentation and reserved.
		{"192.0.2.1", ssrf.ClassDocumentation},
		{"2001:db8::1", ssrf.ClassDocumentation},
		{"198.18.0.1", ssrf.ClassReserved},
	} {
		a := netip.MustParseAddr(tc.addr)
		class, ok := ssrf.Check(a)
		require.Equal(t, tc.class == "", ok, "%s", tc.addr)
		require.Equal(t, tc.class, class, "%s", tc.addr)

		err := ssrf.Guard{}.CheckAddr(net.JoinHostPort(tc.addr, "443"))
		if tc.class == "" {
			require.NoError(t, err, tc.addr)
		} else {
			require.ErrorIs(t, err, ssrf.ErrRefused, tc.addr)
			require.NoError(t, ssrf.Guard{AllowPrivate: true}.CheckAddr(net.JoinHostPort(tc.addr, "443")), tc.addr)
		}
	}
}

func client(g ssrf.Guard) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second, Control: g.Control}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, Proxy: nil}, Timeout: 5 * time.Second}
}

// TestGuardAtConnectTime dials a name that resolves to 127.0.0.1: the guard
// sees the resolved address, not the name.
func TestGuardAtConnectTime(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))

	for _, host := range []string{"localhost", "127.0.0.1", "[::ffff:127.0.0.1]"} {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+host+":"+port+"/", nil)
		_, err := client(ssrf.Guard{}).Do(req)
		require.Error(t, err, host)
		require.True(t, errors.Is(err, ssrf.ErrRefused), "%s: %v", host, err)
		var re *ssrf.RefusedError
		require.ErrorAs(t, err, &re)
		require.Equal(t, ssrf.ClassLoopback, re.Class)
	}
	require.Zero(t, hits.Load(), "no request may reach a refused destination")

	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://localhost:"+port+"/", nil)
	resp, err := client(ssrf.Guard{AllowPrivate: true}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.EqualValues(t, 1, hits.Load())
}

func FuzzCheckAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:80", "[::1]:443", "8.8.8.8:1", "garbage", "[fe80::1%eth0]:80", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := ssrf.Guard{}.CheckAddr(s)
		if err != nil && !errors.Is(err, ssrf.ErrRefused) {
			t.Fatalf("unexpected error type: %v", err)
		}
		if ap, perr := netip.ParseAddrPort(s); perr == nil {
			if _, ok := ssrf.Check(ap.Addr()); ok != (err == nil) {
				t.Fatalf("CheckAddr and Check disagree on %q", s)
			}
		}
	})
}
