package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons, the values of hookd_http_connections_refused_total's
// reason label.
const (
	refusedMaxConns          = "max_conns"
	refusedMaxConnsPerClient = "max_conns_per_client"
)

// connLimits wraps the --listen listener so that no client can take every
// file descriptor of the process: beyond MaxConns open connections, or
// MaxConnsPerClient from one client, a new connection is closed at once,
// before net/http reads a byte of it, and counted. File descriptors are
// shared with Kafka, Postgres and the receivers' connections: a listener
// without a cap lets whoever reaches it stop deliveries.
type connLimits struct {
	net.Listener
	maxTotal, maxPerClient int
	refused                *prometheus.CounterVec

	mu      sync.Mutex
	total   int
	clients map[string]int
}

func newConnLimits(ln net.Listener, maxTotal, maxPerClient int) *connLimits {
	l := &connLimits{Listener: ln, maxTotal: maxTotal, maxPerClient: maxPerClient, clients: make(map[string]int),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_http_connections_refused_total",
			Help: "Connections to --listen closed on accept because the total or the client's cap was reached.",
		}, []string{"reason"})}
	l.refused.WithLabelValues(refusedMaxConns)
	l.refused.WithLabelValues(refusedMaxConnsPerClient)
	return l
}

// register exports the refusals and the open connections.
func (l *connLimits) register(reg prometheus.Registerer) error {
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hookd_http_connections_open",
		Help: "Connections to --listen open now (at most --listen-max-conns).",
	}, func() float64 { return float64(l.open()) })
	for _, c := range []prometheus.Collector{l.refused, open} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering listener metrics: %w", err)
		}
	}
	return nil
}

// Accept returns the next connection within the caps; the ones beyond them
// are closed here and never reach net/http.
func (l *connLimits) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := clientKey(c.RemoteAddr())
		if reason := l.admit(key); reason != "" {
			l.refused.WithLabelValues(reason).Inc()
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, release: sync.OnceFunc(func() { l.release(key) })}, nil
	}
}

// admit counts a new connection from key, or says which cap refuses it.
func (l *connLimits) admit(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.maxTotal:
		return refusedMaxConns
	case l.clients[key] >= l.maxPerClient:
		return refusedMaxConnsPerClient
	}
	l.total++
	l.clients[key]++
	return ""
}

func (l *connLimits) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.clients[key]--; l.clients[key] <= 0 {
		delete(l.clients, key)
	}
}

func (l *connLimits) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// limitedConn gives its place back once, on the first Close.
type limitedConn struct {
	net.Conn
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// clientKey is the client a connection counts against: its IP address, or
// its /64 for IPv6, since one IPv6 host usually holds a whole /64 and could
// otherwise open MaxConnsPerClient connections from each of its addresses.
// An address that is not ip:port (none on TCP) is its own client.
func clientKey(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap().WithZone("")
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64) // cannot fail: 64 bits of an IPv6 address
	return p.String()
}

// limitBodies bounds every request body before routing and authentication:
// a declared length beyond limit answers 413 at once (the connection is then
// closed, unread), and a body without a declared length stops being read at
// limit+1 bytes. Handlers keep their own, possibly smaller, limits.
func limitBodies(next http.Handler, limit int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > limit {
			w.Header().Set("Connection", "close")
			writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body larger than %d bytes", limit))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		next.ServeHTTP(w, r)
	})
}
