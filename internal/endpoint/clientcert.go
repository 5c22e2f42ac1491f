package endpoint

import (
	"crypto/tls"
	"crypto/x509"
	"strings"
	"time"
)

// MaxClientCertBytes bounds the PEM text of a client certificate chain
// and of its key.
const MaxClientCertBytes = 16 << 10

// ClientCertWarning is how long before its expiry a client certificate is
// warned about (owner alerts, the portal).
const ClientCertWarning = 14 * 24 * time.Hour

// ClientCertInfo describes a client certificate for its owner.
type ClientCertInfo struct {
	// Subject is the leaf's subject, e.g. "CN=hookd,O=Acme".
	Subject string
	// NotAfter is when the leaf expires.
	NotAfter time.Time
}

// ParseClientCert checks a client certificate and key for mutual TLS: both
// given or neither, each at most MaxClientCertBytes of PEM, the
// certificate chain parses, the key is the certificate's, and the leaf has
// not expired at now. Errors name the field (client_cert, client_key) and
// never contain the key. It returns the leaf's description; with neither
// given, a zero ClientCertInfo and nil.
func ParseClientCert(certPEM, keyPEM string, now time.Time) (ClientCertInfo, error) {
	switch {
	case certPEM == "" && keyPEM == "":
		return ClientCertInfo{}, nil
	case certPEM == "":
		return ClientCertInfo{}, invalid("client_cert: required with client_key")
	case keyPEM == "":
		return ClientCertInfo{}, invalid("client_key: required with client_cert")
	case len(certPEM) > MaxClientCertBytes:
		return ClientCertInfo{}, invalid("client_cert: at most %d bytes of PEM, got %d", MaxClientCertBytes, len(certPEM))
	case len(keyPEM) > MaxClientCertBytes:
		return ClientCertInfo{}, invalid("client_key: at most %d bytes of PEM, got %d", MaxClientCertBytes, len(keyPEM))
	}
	pair, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
	if err != nil {
		return ClientCertInfo{}, invalid("%s", clientCertProblem(err))
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return ClientCertInfo{}, invalid("client_cert: %v", err)
	}
	info := ClientCertInfo{Subject: leaf.Subject.String(), NotAfter: leaf.NotAfter}
	if !now.IsZero() && now.After(leaf.NotAfter) {
		return info, invalid("client_cert: expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return info, nil
}

// clientCertProblem names the field of a tls.X509KeyPair error; the
// messages of crypto/tls name no key material.
func clientCertProblem(err error) string {
	msg := strings.TrimPrefix(err.Error(), "tls: ")
	switch {
	case strings.Contains(msg, "private key does not match"):
		return "client_key: does not match the public key of client_cert"
	case strings.Contains(msg, "certificate input"), strings.Contains(msg, "CERTIFICATE"), strings.Contains(msg, "certificate"):
		if strings.Contains(msg, "private key") {
			return "client_key: " + msg
		}
		return "client_cert: " + msg
	}
	return "client_key: " + msg
}

// ClientCertInfo describes the endpoint's client certificate; ok is false
// when it has none (or it does not parse).
func (e *Endpoint) ClientCertInfo() (info ClientCertInfo, ok bool) {
	if e.ClientCert == "" {
		return ClientCertInfo{}, false
	}
	info, err := ParseClientCert(e.ClientCert, e.ClientKey, time.Time{})
	return info, err == nil
}
