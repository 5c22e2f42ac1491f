package ssrf_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher/ssrf"
)

// The dial-time guard refuses exactly what Check refuses.
func TestGuardCheckAddr(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808",
		"127.0.0.1", "::1", "10.0.0.1", "169.254.169.254", "::ffff:0:a9fe:a9fe", "2001:2::1", "2001:10::1", "2001:20::1",
		"5f00::1", "fe80::1%eth0", "64:ff9b:1::1", "2002:a00:1::"} {
		_, ok := ssrf.Check(netip.MustParseAddr(addr))
		err := ssrf.Guard{}.CheckAddr(net.JoinHostPort(addr, "443"))
		if ok {
			require.NoError(t, err, addr)
			continue
		}
		require.ErrorIs(t, err, ssrf.ErrRefused, addr)
		var re *ssrf.RefusedError
		require.ErrorAs(t, err, &re)
		require.NoError(t, ssrf.Guard{AllowPrivate: true}.CheckAddr(net.JoinHostPort(addr, "443")), addr)
	}
	require.ErrorIs(t, ssrf.Guard{}.CheckAddr("not-an-ip:80"), ssrf.ErrRefused, "the dialler passes resolved IPs only")
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

// resolver answers from a map; a missing name fails like NXDOMAIN.
type resolver map[string][]string

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := r[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	dns := resolver{
		"public.example":   {"93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"},
		"internal.example": {"10.1.2.3"},
		"mixed.example":    {"93.184.216.34", "169.254.169.254"},
		"v6.example":       {"fd00::1"},
		"nat64.example":    {"64:ff9b::7f00:1"},
	}
	for _, tc := range []struct{ url, want string }{
		{"https://public.example/hook", ""},
		{"https://93.184.216.34:8443/hook", ""},
		{"https://[2606:4700:4700::1111]/", ""},
		{"http://does-not-resolve.example/", ""}, // DNS failure: the dial-time guard decides
		{"https://10.0.0.1/", "10.0.0.1 is a private address (RFC 1918)"},
		{"http://127.0.0.1:8080/x", "127.0.0.1 is a loopback address (RFC 1122)"},
		{"http://[::1]/", "::1 is a loopback address (RFC 4291)"},
		{"http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1 is a loopback address (RFC 1122)"},
		{"http://[::ffff:0:a9fe:a9fe]/", "::ffff:0:a9fe:a9fe embeds 169.254.169.254"},
		{"http://[fe80::1%25eth0]/", "fe80::1 is a link-local address (RFC 4291)"},
		{"http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a cloud instance metadata address"},
		{"http://localhost:9000/", "localhost is a loopback name (RFC 6761)"},
		{"http://LOCALHOST./", "LOCALHOST. is a loopback name (RFC 6761)"},
		{"http://api.localhost/", "api.localhost is a loopback name (RFC 6761)"},
		{"https://internal.example/", "internal.example resolves to 10.1.2.3, which is a private address (RFC 1918)"},
		{"https://mixed.example/", "mixed.example resolves to 169.254.169.254, which is a cloud instance metadata address"},
		{"https://v6.example/", "v6.example resolves to fd00::1, which is a unique-local address (RFC 4193)"},
		{"https://nat64.example/", "nat64.example resolves to 64:ff9b::7f00:1, which embeds 127.0.0.1, a loopback address"},
	} {
		err := ssrf.CheckURL(context.Background(), dns, tc.url)
		if tc.want == "" {
			require.NoError(t, err, tc.url)
			continue
		}
		require.ErrorIs(t, err, ssrf.ErrRefused, tc.url)
		require.Contains(t, err.Error(), tc.want, tc.url)
	}
	for _, bad := range []string{"https://", "::not a url", "mailto:x@example.com"} {
		err := ssrf.CheckURL(context.Background(), dns, bad)
		require.Error(t, err, bad)
		require.NotErrorIs(t, err, ssrf.ErrRefused, bad)
	}
}

// A resolver that hangs is given up on after LookupTimeout at most (here
// the caller's shorter deadline), and the URL is accepted.
func TestCheckURLLookupTimeout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.NoError(t, ssrf.CheckURL(ctx, hangingResolver{}, "https://slow.example/"))
	require.Less(t, time.Since(start), ssrf.LookupTimeout)
}

type hangingResolver struct{}

func (hangingResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// Every IPv4 address is judged the same in each form that embeds it and
// that hookd judges by the embedded address: IPv4-mapped, NAT64 and 6to4.
func FuzzEmbeddedForms(f *testing.F) {
	for _, a := range []string{"8.8.8.8", "127.0.0.1", "10.0.0.1", "169.254.169.254", "0.0.0.0", "255.255.255.255", "100.64.0.1"} {
		b := netip.MustParseAddr(a).As4()
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) != 4 {
			return
		}
		v4 := netip.AddrFrom4([4]byte(raw))
		class, ok := ssrf.Check(v4)
		forms := map[string]netip.Addr{
			"mapped": netip.AddrFrom16(v4.As16()),
			"nat64":  netip.AddrFrom16([16]byte{0, 0x64, 0xff, 0x9b, 12: raw[0], 13: raw[1], 14: raw[2], 15: raw[3]}),
			"6to4":   netip.AddrFrom16([16]byte{0x20, 0x02, raw[0], raw[1], raw[2], raw[3], 15: 1}),
		}
		for name, a := range forms {
			c, o := ssrf.Check(a)
			if c != class || o != ok {
				t.Fatalf("%s: %s form %s judged %q/%v, the address %q/%v", v4, name, a, c, o, class, ok)
			}
		}
		// The deprecated IPv4-compatible and SIIT forms are never allowed.
		for _, a := range []netip.Addr{
			netip.AddrFrom16([16]byte{12: raw[0], 13: raw[1], 14: raw[2], 15: raw[3]}),
			netip.AddrFrom16([16]byte{8: 0xff, 9: 0xff, 12: raw[0], 13: raw[1], 14: raw[2], 15: raw[3]}),
		} {
			if _, o := ssrf.Check(a); o {
				t.Fatalf("%s allowed", a)
			}
		}
	})
}

// CheckURL never panics, a refusal is always a one-line *RefusedError, and
// an IP-literal host is judged exactly as Check judges it.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://example.com/", "http://10.0.0.1/", "http://[::ffff:0:a9fe:a9fe]:80/", "http://localhost/",
		"http://[fe80::1%25eth0]/", "http://127.1/", "http://0x7f000001/", "https://user:pw@host/", "http://[::1", "", "http://x.localhost./"} {
		f.Add(s)
	}
	dns := resolver{"example.com": {"93.184.216.34"}}
	f.Fuzz(func(t *testing.T, raw string) {
		err := ssrf.CheckURL(context.Background(), dns, raw)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error %q", err)
		}
		if errors.Is(err, ssrf.ErrRefused) {
			var re *ssrf.RefusedError
			if !errors.As(err, &re) {
				t.Fatalf("refusal without a RefusedError: %v", err)
			}
		}
		u, perr := url.Parse(raw)
		if perr != nil {
			return
		}
		if a, aerr := netip.ParseAddr(u.Hostname()); aerr == nil {
			if _, ok := ssrf.Check(a); ok != (err == nil) {
				t.Fatalf("%q: CheckURL %v, Check ok=%v", raw, err, ok)
			}
		}
	})
}
