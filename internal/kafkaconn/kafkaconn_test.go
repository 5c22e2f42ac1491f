package kafkaconn_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/tlstest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// secureCluster starts a kfake cluster that requires TLS (serving a
// certificate from ca) and SASL, with one superuser per mechanism.
func secureCluster(t *testing.T, ca *tlstest.CA, clientCAs bool, extra ...kfake.Opt) []string {
	t.Helper()
	srv := ca.Server(t, "kafka")
	var pool = ca.Pool
	if !clientCAs {
		pool = nil
	}
	opts := append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.TLS(tlstest.ServerConfig(srv, pool)),
		kfake.EnableSASL(),
		kfake.Superuser(kafkaconn.MechanismSCRAMSHA256, "hookd", "s3cret-256"),
		kfake.Superuser(kafkaconn.MechanismSCRAMSHA512, "hookd512", "s3cret-512"),
		kfake.Superuser(kafkaconn.MechanismPlain, "plainuser", "s3cret-plain"),
	}, extra...)
	c, err := kfake.NewCluster(opts...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// connect builds a client from cfg the way the daemon does (Validate, then
// Opts) and runs the start-up check.
func connect(t *testing.T, cfg kafkaconn.Config, extra ...kgo.Opt) (*kgo.Client, error) {
	t.Helper()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl, err := kgo.NewClient(append(kafkaconn.Opts(cfg, discard), extra...)...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return cl, kafkaconn.Check(ctx, cl, cfg.Brokers, 10*time.Second)
}

func TestTLSAndSASLMechanismsConnectAndProduce(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	addrs := secureCluster(t, ca, false, kfake.SeedTopics(1, "t"))
	for _, tc := range []struct{ mech, user, pass string }{
		{"SCRAM-SHA-256", "hookd", "s3cret-256"},
		{"scram-sha-512", "hookd512", "s3cret-512"},
		{"PLAIN", "plainuser", "s3cret-plain"},
	} {
		t.Run(tc.mech, func(t *testing.T) {
			t.Parallel()
			cl, err := connect(t, kafkaconn.Config{
				Brokers: addrs,
				TLS:     kafkaconn.TLS{CAFile: ca.File},
				SASL:    kafkaconn.SASL{Mechanism: tc.mech, Username: tc.user, Password: tc.pass},
			})
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte(tc.mech)}).FirstErr())
		})
	}
}

func TestWrongCredentialsFailQuicklyWithOneClearError(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	addrs := secureCluster(t, ca, false)
	for _, tc := range []struct{ name, mech, user, pass string }{
		{"wrong password", "SCRAM-SHA-256", "hookd", "wrong"},
		{"unknown user", "SCRAM-SHA-256", "nobody", "s3cret-256"},
		{"wrong mechanism for user", "SCRAM-SHA-512", "hookd", "s3cret-256"},
		{"plain wrong password", "PLAIN", "plainuser", "wrong"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := connect(t, kafkaconn.Config{
				Brokers: addrs,
				TLS:     kafkaconn.TLS{CAFile: ca.File},
				SASL:    kafkaconn.SASL{Mechanism: tc.mech, Username: tc.user, Password: tc.pass},
			})
			require.Error(t, err)
			t.Log(err)
			require.Contains(t, err.Error(), "refused hookd's "+strings.ToUpper(tc.mech)+" credentials")
			require.NotContains(t, err.Error(), tc.pass, "the password must never appear in an error")
			require.NotContains(t, err.Error(), "\n")
			require.Less(t, time.Since(start), 5*time.Second, "bad credentials are not retried until the timeout")
		})
	}
}

func TestTLSFailures(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	addrs := secureCluster(t, ca, true) // requires a client certificate
	other := tlstest.NewCA(t)
	client := ca.Client(t, "hookd")
	sasl := kafkaconn.SASL{Mechanism: "SCRAM-SHA-256", Username: "hookd", Password: "s3cret-256"}

	t.Run("mutual TLS with a client certificate", func(t *testing.T) {
		t.Parallel()
		_, err := connect(t, kafkaconn.Config{Brokers: addrs, SASL: sasl,
			TLS: kafkaconn.TLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile}})
		require.NoError(t, err)
	})
	t.Run("no client certificate", func(t *testing.T) {
		t.Parallel()
		_, err := connect(t, kafkaconn.Config{Brokers: addrs, SASL: sasl, DialTimeout: time.Second, TLS: kafkaconn.TLS{CAFile: ca.File}})
		t.Log(err)
		require.Error(t, err)
		require.Contains(t, err.Error(), "kafka brokers "+strings.Join(addrs, ","))
	})
	t.Run("server name checked", func(t *testing.T) {
		t.Parallel()
		_, err := connect(t, kafkaconn.Config{Brokers: addrs, SASL: sasl,
			TLS: kafkaconn.TLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: "kafka"}})
		require.NoError(t, err, "the server certificate names kafka")
		_, err = connect(t, kafkaconn.Config{Brokers: addrs, SASL: sasl, DialTimeout: time.Second,
			TLS: kafkaconn.TLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: "elsewhere.example"}})
		t.Log(err)
		require.ErrorContains(t, err, "certificate")
	})
	t.Run("untrusted server", func(t *testing.T) {
		t.Parallel()
		_, err := connect(t, kafkaconn.Config{Brokers: addrs, SASL: sasl, DialTimeout: time.Second,
			TLS: kafkaconn.TLS{CAFile: other.File, CertFile: client.CertFile, KeyFile: client.KeyFile}})
		t.Log(err)
		require.ErrorContains(t, err, "certificate")
	})
	t.Run("plaintext to a TLS listener", func(t *testing.T) {
		t.Parallel()
		_, err := connect(t, kafkaconn.Config{Brokers: addrs, SASL: sasl, DialTimeout: time.Second})
		require.Error(t, err)
		require.Contains(t, err.Error(), "kafka brokers "+strings.Join(addrs, ","))
	})
}

func TestValidateNamesFieldAndValue(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	ca := tlstest.NewCA(t)
	cert := ca.Client(t, "c")
	for _, tc := range []struct {
		name string
		cfg  kafkaconn.Config
		want string
	}{
		{"broker", kafkaconn.Config{Brokers: []string{"nohostport"}}, `brokers: "nohostport" is not host:port`},
		{"mechanism", kafkaconn.Config{SASL: kafkaconn.SASL{Mechanism: "GSSAPI", Username: "u", Password: "p"}}, `kafka sasl mechanism: "GSSAPI" is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`},
		{"username without mechanism", kafkaconn.Config{SASL: kafkaconn.SASL{Username: "u"}}, `kafka sasl mechanism: none given for username "u"`},
		{"no username", kafkaconn.Config{SASL: kafkaconn.SASL{Mechanism: "plain"}}, "kafka sasl username: required with mechanism PLAIN"},
		{"no password", kafkaconn.Config{SASL: kafkaconn.SASL{Mechanism: "SCRAM-SHA-512", Username: "u"}}, "kafka sasl password: required"},
		{"missing ca", kafkaconn.Config{TLS: kafkaconn.TLS{CAFile: filepath.Join(dir, "nope.pem")}}, "kafka tls ca: open " + filepath.Join(dir, "nope.pem")},
		{"ca not pem", kafkaconn.Config{TLS: kafkaconn.TLS{CAFile: notPEM}}, `kafka tls ca: "` + notPEM + `" holds no PEM certificate`},
		{"cert without key", kafkaconn.Config{TLS: kafkaconn.TLS{CertFile: cert.CertFile}}, `kafka tls cert: "` + cert.CertFile + `" given without a key file`},
		{"key without cert", kafkaconn.Config{TLS: kafkaconn.TLS{KeyFile: cert.KeyFile}}, `kafka tls key: "` + cert.KeyFile + `" given without a certificate file`},
		{"mismatched pair", kafkaconn.Config{TLS: kafkaconn.TLS{CertFile: cert.CertFile, KeyFile: notPEM}}, `kafka tls cert "` + cert.CertFile + `" and key "` + notPEM + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cfg.Brokers == nil {
				tc.cfg.Brokers = []string{"127.0.0.1:9092"}
			}
			tc.cfg.SetDefaults()
			require.ErrorContains(t, tc.cfg.Validate(), tc.want)
		})
	}
	ok := kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"}, TLS: kafkaconn.TLS{CAFile: ca.File, CertFile: cert.CertFile, KeyFile: cert.KeyFile},
		SASL: kafkaconn.SASL{Mechanism: "scram-sha-256", Username: "u", Password: "p"}}
	require.NoError(t, ok.Validate())
}

// TestOptsUnloadedTLSFailsEveryDial: Opts on a config that skipped Validate
// reports the bad file when dialling instead of timing out vaguely.
func TestOptsUnloadedTLSFailsEveryDial(t *testing.T) {
	t.Parallel()
	cfg := kafkaconn.Config{Brokers: []string{"127.0.0.1:1"}, TLS: kafkaconn.TLS{CAFile: "/nonexistent/ca.pem"}}
	cl, err := kgo.NewClient(kafkaconn.Opts(cfg, discard)...)
	require.NoError(t, err)
	defer cl.Close()
	ctx := context.Background()
	err = kafkaconn.Check(ctx, cl, cfg.Brokers, 5*time.Second)
	require.ErrorContains(t, err, "kafka tls ca: open /nonexistent/ca.pem")
}

// TestProducerCannotLoseAcknowledgedRecords pins acks=all and idempotence:
// the two settings that make an acknowledged produce durable on
// min.insync.replicas brokers and a retried produce free of duplicates.
func TestProducerCannotLoseAcknowledgedRecords(t *testing.T) {
	t.Parallel()
	cl, err := kgo.NewClient(kafkaconn.Opts(kafkaconn.Config{Brokers: []string{"127.0.0.1:9092"}}, discard)...)
	require.NoError(t, err)
	defer cl.Close()
	require.Equal(t, kgo.AllISRAcks(), cl.OptValue(kgo.RequiredAcks), "acks=all")
	require.Equal(t, false, cl.OptValue(kgo.DisableIdempotentWrite), "idempotent producer")
	require.Equal(t, "hookd", cl.OptValue(kgo.ClientID))
}

func TestSASLLogValueHidesPassword(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "sasl", kafkaconn.SASL{Mechanism: "PLAIN", Username: "u", Password: "hunter2"})
	require.NotContains(t, buf.String(), "hunter2")
	require.Contains(t, buf.String(), `"username":"u"`)
}
