package dispatcher

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/hookd/hookd/dispatcher/ssrf"
)

// ParseEgressProxy checks an egress proxy URL: http://[user:pass@]host:port,
// nothing else. Empty means no proxy.
func ParseEgressProxy(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, fmt.Errorf("egress proxy %q: %w", raw, err)
	case u.Scheme != "http":
		return nil, fmt.Errorf("egress proxy %q: must be http://host:port (an HTTP CONNECT proxy)", u.Redacted())
	case u.Hostname() == "" || u.Port() == "":
		return nil, fmt.Errorf("egress proxy %q: needs a host and a port", u.Redacted())
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("egress proxy %q: no path, query or fragment", u.Redacted())
	}
	return u, nil
}

// connectDialer reaches destinations through an HTTP CONNECT proxy. The SSRF
// guard still applies to the destination: its host is resolved here and
// every address checked before CONNECT is sent, and the proxy is asked for
// the checked IP, never the name, so that it cannot resolve the name to
// somewhere else. The proxy's own address is the operator's and is not
// checked.
type connectDialer struct {
	proxy    *url.URL
	guard    ssrf.Guard
	resolver ssrf.Resolver
	dialer   *net.Dialer
	timeout  time.Duration
}

func (d *connectDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	target, err := d.destination(ctx, addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	conn, err := d.dialer.DialContext(ctx, "tcp", d.proxy.Host)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: %w", d.proxy.Host, err)
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	br, err := d.connect(conn, target)
	if err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: conn, r: br}, nil
	}
	return conn, nil
}

// destination resolves addr's host and returns the first address the guard
// allows as "ip:port"; any refused address refuses the destination, as the
// direct dialer would refuse it.
func (d *connectDialer) destination(ctx context.Context, addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = d.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return "", fmt.Errorf("resolving %s: %w", host, err)
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("resolving %s: no addresses", host)
	}
	for _, ip := range ips {
		if err := d.guard.CheckAddr(netip.AddrPortFrom(ip.Unmap(), 0).String()); err != nil {
			return "", err
		}
	}
	return net.JoinHostPort(ips[0].Unmap().String(), port), nil
}

// connect sends CONNECT target and reads the proxy's answer.
func (d *connectDialer) connect(conn net.Conn, target string) (*bufio.Reader, error) {
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target, Header: http.Header{}}
	if u := d.proxy.User; u != nil {
		pass, _ := u.Password()
		req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass)))
	}
	if err := req.Write(conn); err != nil {
		return nil, fmt.Errorf("egress proxy %s: sending CONNECT: %w", d.proxy.Host, err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, fmt.Errorf("egress proxy %s: reading the CONNECT answer: %w", d.proxy.Host, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &ProxyError{Proxy: d.proxy.Host, Status: resp.StatusCode}
	}
	return br, nil
}

// ProxyError is a CONNECT the egress proxy refused.
type ProxyError struct {
	Proxy  string
	Status int
}

func (e *ProxyError) Error() string {
	return fmt.Sprintf("egress proxy %s refused CONNECT: %d %s", e.Proxy, e.Status, http.StatusText(e.Status))
}

var errProxy = errors.New("egress proxy")

func (e *ProxyError) Unwrap() error { return errProxy }

// bufferedConn reads what the CONNECT answer's reader buffered first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
