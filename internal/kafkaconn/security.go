package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// TLS configures encrypted connections to the brokers. There is deliberately
// no option to skip certificate verification: point CAFile at the cluster's
// CA instead.
type TLS struct {
	// Enabled turns TLS on. Setting any file or ServerName turns it on too.
	// Defaults to false.
	Enabled bool
	// CAFile is a PEM bundle of the CAs that sign the brokers' certificates.
	// Defaults to the system's roots.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// clusters that authenticate clients by certificate (mTLS). Both or
	// neither. Defaults to no client certificate.
	CertFile string
	KeyFile  string
	// ServerName is the name expected in the brokers' certificates.
	// Defaults to the host of each broker address dialled.
	ServerName string
}

func (t TLS) enabled() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" || t.ServerName != ""
}

// load builds the tls.Config, or nil when TLS is off.
func (t TLS) load() (*tls.Config, error) {
	if !t.enabled() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka tls ca: %q holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka tls cert %q and key %q: %w", t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case t.CertFile != "":
		return nil, fmt.Errorf("kafka tls cert: %q given without a key file", t.CertFile)
	case t.KeyFile != "":
		return nil, fmt.Errorf("kafka tls key: %q given without a certificate file", t.KeyFile)
	}
	return cfg, nil
}

// SASL mechanisms.
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// SASL configures authentication to the brokers.
type SASL struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (any case); empty
	// means no SASL. PLAIN sends the password as is: use it only with TLS.
	// Defaults to none.
	Mechanism string
	// Username to authenticate as. Required with a mechanism.
	Username string
	// Password of Username. Required with a mechanism. Never logged.
	Password string
}

// LogValue keeps the password out of logs.
func (s SASL) LogValue() slog.Value {
	return slog.GroupValue(slog.String("mechanism", s.Mechanism), slog.String("username", s.Username))
}

func (s SASL) validate() error {
	switch strings.ToUpper(s.Mechanism) {
	case "":
		if s.Username != "" {
			return fmt.Errorf("kafka sasl mechanism: none given for username %q; use %s, %s or %s", s.Username, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
		}
		return nil
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
	default:
		return fmt.Errorf("kafka sasl mechanism: %q is not %s, %s or %s", s.Mechanism, MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
	}
	if s.Username == "" {
		return fmt.Errorf("kafka sasl username: required with mechanism %s", strings.ToUpper(s.Mechanism))
	}
	if s.Password == "" {
		return errors.New("kafka sasl password: required with a username (not shown)")
	}
	return nil
}

// mechanism returns the franz-go mechanism, or nil without SASL.
func (s SASL) mechanism() sasl.Mechanism {
	switch strings.ToUpper(s.Mechanism) {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()
	case MechanismSCRAMSHA512:
		return scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()
	}
	return nil
}
