package hookbench

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Schemes of the receivers (--scheme).
const (
	SchemeHTTPS = "https"
	SchemeHTTP  = "http"
)

// receiverTLS is the run's certificate authority and the receivers'
// certificate it signed. The CA's key never leaves memory; only its
// certificate is written (CAFile), for the processes that trust it
// through SSL_CERT_FILE.
type receiverTLS struct {
	// CAFile is the CA certificate, PEM.
	CAFile string
	// Pool holds the CA certificate (B0's and B1's in-process clients).
	Pool *x509.CertPool
	cert tls.Certificate
}

// newReceiverTLS mints a CA and a server certificate for 127.0.0.1 and
// localhost, valid for two days, and writes the CA certificate to
// dir/ca.pem. ECDSA P-256, what most https receivers' certificates use
// today.
func newReceiverTLS(dir string) (*receiverTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hookbench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the receivers' certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	rt := &receiverTLS{CAFile: filepath.Join(dir, "ca.pem"), Pool: x509.NewCertPool(),
		cert: tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key, Leaf: leaf}}
	rt.Pool.AddCert(ca)
	if err := os.WriteFile(rt.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return nil, fmt.Errorf("writing the CA certificate: %w", err)
	}
	return rt, nil
}

// serverConfig is one receiver's TLS configuration: its handshakes are
// counted into st.
func (rt *receiverTLS) serverConfig(st *connStats) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{rt.cert},
		MinVersion:   tls.VersionTLS12,
		// Called once per completed handshake, full or resumed, on
		// TLS 1.2 and 1.3 alike (with or without client certificates).
		VerifyConnection: func(cs tls.ConnectionState) error {
			st.handshake(cs.DidResume, cs.NegotiatedProtocol)
			return nil
		},
	}
}

// connStats counts one receiver's connections and TLS handshakes.
type connStats struct {
	opened, closed, full, resumed atomic.Int64
	peakOpen                      atomic.Int64

	mu     sync.Mutex
	protos map[string]int64 // handshakes by negotiated ALPN protocol
}

func newConnStats() *connStats { return &connStats{protos: map[string]int64{}} }

// connState is the receiver's http.Server.ConnState hook.
func (c *connStats) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		n := c.opened.Add(1) - c.closed.Load() // approximate under concurrency: a peak, not a ledger
		for {
			p := c.peakOpen.Load()
			if n <= p || c.peakOpen.CompareAndSwap(p, n) {
				break
			}
		}
	case http.StateClosed, http.StateHijacked:
		c.closed.Add(1)
	}
}

func (c *connStats) handshake(resumed bool, proto string) {
	if resumed {
		c.resumed.Add(1)
	} else {
		c.full.Add(1)
	}
	if proto == "" {
		proto = "http/1.1 (no ALPN)"
	}
	c.mu.Lock()
	c.protos[proto]++
	c.mu.Unlock()
}

// connSnapshot is what connStats counted up to one moment.
type connSnapshot struct {
	opened, closed, full, resumed, peakOpen int64
	protos                                  map[string]int64
}

func (c *connStats) snapshot() connSnapshot {
	c.mu.Lock()
	protos := make(map[string]int64, len(c.protos))
	for p, n := range c.protos {
		protos[p] = n
	}
	c.mu.Unlock()
	return connSnapshot{opened: c.opened.Load(), closed: c.closed.Load(), full: c.full.Load(),
		resumed: c.resumed.Load(), peakOpen: c.peakOpen.Load(), protos: protos}
}

// protocolList renders handshakes by protocol as "h2 12, http/1.1 3".
func protocolList(protos map[string]int64) string {
	names := make([]string, 0, len(protos))
	for p := range protos {
		names = append(names, p)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, p := range names {
		parts[i] = fmt.Sprintf("%s %d", p, protos[p])
	}
	return strings.Join(parts, ", ")
}
