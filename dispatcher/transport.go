package dispatcher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"
)

// Transport tuning. Every request goes through one net/http Transport:
// HTTP/1.1, and HTTP/2 where a receiver offers it over TLS (ALPN). Its
// parser is the one the hostile-receiver suite holds to account: a
// response that leaves bytes on a connection, an unsolicited response on
// an idle one, a body not read to its end all close the connection
// instead of handing it to the next request, whoever's it is.
const (
	// idleConnTimeout closes keep-alive connections idle this long.
	idleConnTimeout = 90 * time.Second
	// maxResponseHeaderBytes bounds a response's status line and headers
	// (HTTP/2: its header list).
	maxResponseHeaderBytes = 64 << 10
	// tlsSessionCacheSize is how many TLS sessions are kept for
	// resumption, one per receiver host name: a new connection to a host
	// seen before resumes instead of a full handshake.
	tlsSessionCacheSize = 4096
	// h2SendPingTimeout and h2PingTimeout are the HTTP/2 health check: a
	// connection silent this long gets a PING, and is closed (its requests
	// failing at once instead of at their timeouts, later ones going to a
	// new connection) when the PING is not answered in time.
	h2SendPingTimeout = 15 * time.Second
	h2PingTimeout     = 5 * time.Second
)

// newTransport returns the transport of every webhook request, dialling
// with dial (the SSRF-guarded dialer, or the egress proxy's). The
// request's context bounds the whole exchange (Timeout), so there is no
// separate ResponseHeaderTimeout; nothing sends Expect: 100-continue.
func newTransport(cfg Config, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		Proxy:       nil, // never from the environment; --egress-proxy is dialled by dial
		DialContext: dial,
		TLSClientConfig: &tls.Config{
			RootCAs:            cfg.endpointRoots, // nil: the system roots
			ClientSessionCache: tls.NewLRUClientSessionCache(tlsSessionCacheSize),
		},
		TLSHandshakeTimeout:    cfg.ConnectTimeout,
		MaxIdleConns:           0, // no overall bound: MaxIdleConnsPerHost is the one that matters
		MaxIdleConnsPerHost:    cfg.IdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		DisableCompression:     true, // the excerpt is what the receiver sent; no decompression bombs
		ForceAttemptHTTP2:      true, // with our own TLS config and dialer, HTTP/2 must be asked for
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: h2SendPingTimeout,
			PingTimeout:     h2PingTimeout,
			// A connection whose writes stall (a receiver that stopped
			// reading) is closed rather than holding every stream on it.
			WriteByteTimeout: cfg.Timeout,
			// No HPACK dynamic table for request headers: three of every
			// request's header values (webhook-id, -timestamp, -signature)
			// are new, so indexing them only evicts entries, and
			// evictions cost 12% of the dispatcher's CPU over HTTP/2 (a
			// profile of BenchmarkDispatcher/https-h2). Names and the other
			// values go as literals or from the static table instead: a
			// few dozen bytes more per request on the wire.
			MaxEncoderHeaderTableSize: 1,
		},
	}
}

// LoadEndpointCAs returns the system roots plus the CA certificates of
// the PEM bundle at path: what https endpoints are verified against with
// --endpoint-ca-file. Every PEM block must be a certificate that parses,
// and there must be at least one.
func LoadEndpointCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool() // no system roots here: the file's alone
	}
	n := 0
	for rest := data; len(bytes.TrimSpace(rest)) > 0; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		switch {
		case block == nil:
			return nil, fmt.Errorf("%s: not a PEM certificate bundle (after %d certificates)", path, n)
		case block.Type != "CERTIFICATE":
			return nil, fmt.Errorf("%s: PEM block %d is a %q, not a CERTIFICATE", path, n+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", path, n+1, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, errors.New(path + ": no certificate in it")
	}
	return pool, nil
}

// Client certificates (mutual TLS). An endpoint with a client certificate
// is sent to through a Transport of its certificate's own, whose TLS
// config presents that certificate when the receiver asks for one
// (GetClientCertificate): connections, HTTP/2 streams and TLS sessions are
// pooled per certificate, so no connection made with one endpoint's
// certificate, and no session resumed from one, ever carries another
// endpoint's request. Endpoints without one share the main Transport,
// which presents none.

// certTransportIdle is how long a certificate's Transport may go unused
// before it is closed and forgotten (its certificate changed, or its
// endpoint went quiet).
const certTransportIdle = 10 * time.Minute

// certTransports holds one Transport per client certificate in use.
type certTransports struct {
	newTransport func() *http.Transport
	mu           sync.Mutex
	m            map[[32]byte]*certTransport
	swept        time.Time
}

type certTransport struct {
	rt   *http.Transport
	used time.Time
}

// clientCertID identifies a certificate and key pair.
func clientCertID(certPEM, keyPEM string) [32]byte {
	h := sha256.New()
	h.Write([]byte(certPEM))
	h.Write([]byte{0})
	h.Write([]byte(keyPEM))
	var id [32]byte
	h.Sum(id[:0])
	return id
}

// get returns the Transport of the certificate id, made on first use.
func (c *certTransports) get(id [32]byte, cert *tls.Certificate) *http.Transport {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m, c.swept = map[[32]byte]*certTransport{}, now
	}
	if now.Sub(c.swept) >= certTransportIdle {
		c.sweep(now)
	}
	ct := c.m[id]
	if ct == nil {
		rt := c.newTransport()
		rt.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		}
		ct = &certTransport{rt: rt}
		c.m[id] = ct
	}
	ct.used = now
	return ct.rt
}

// sweep closes and forgets the Transports unused for certTransportIdle.
func (c *certTransports) sweep(now time.Time) {
	c.swept = now
	for id, ct := range c.m {
		if now.Sub(ct.used) >= certTransportIdle {
			ct.rt.CloseIdleConnections()
			delete(c.m, id)
		}
	}
}

// closeIdle closes every certificate Transport's idle connections.
func (c *certTransports) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ct := range c.m {
		ct.rt.CloseIdleConnections()
	}
}
