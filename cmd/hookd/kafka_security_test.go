package main_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/tlstest"
)

// TestRunOnKafkaWithTLSAndSCRAM runs `hookd run` against a three-broker
// cluster that requires TLS and SCRAM-SHA-256: it becomes ready, creates
// its topics with replication factor 3 and min.insync.replicas 2 (the
// defaults with --brokers), and hookctl reaches the same cluster with the
// same HOOKD_* variables. With a wrong password it exits 2 with one line.
func TestRunOnKafkaWithTLSAndSCRAM(t *testing.T) {
	t.Parallel()
	hookd := proctest.Binary(t, "hookd")
	hookctl := proctest.Binary(t, "hookctl")
	db := pgtest.NewUnmigrated(t)
	ca := tlstest.NewCA(t)
	srv := ca.Server(t, "kafka")
	cluster, err := kfake.NewCluster(
		kfake.NumBrokers(3),
		kfake.TLS(tlstest.ServerConfig(srv, nil)),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "hookd", "correct horse"),
	)
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	brokers := strings.Join(cluster.ListenAddrs(), ",")

	httpAddr := fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))
	env := []string{
		"DATABASE_URL=" + db.URL,
		"HOOKD_BROKERS=" + brokers,
		"HOOKD_LISTEN=" + httpAddr,
		"HOOKD_PARTITIONS=2",
		"HOOKD_RETRY_SCHEDULE=30s,2m",
		"HOOKD_KAFKA_TLS_CA=" + ca.File,
		"HOOKD_KAFKA_SASL_MECHANISM=SCRAM-SHA-256",
		"HOOKD_KAFKA_SASL_USERNAME=hookd",
	}

	t.Run("wrong password exits 2 with one line", func(t *testing.T) {
		start := time.Now()
		code, _, stderr := proctest.Run(t, 30*time.Second, hookd, append(env, "HOOKD_KAFKA_SASL_PASSWORD=battery staple"),
			"--log-level", "error", "run", "--listen", "127.0.0.1:0")
		require.Equal(t, 2, code, stderr)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		require.Len(t, lines, 1, "one line, got: %q", stderr)
		require.Equal(t, "hookd: kafka brokers "+brokers+" refused hookd's SCRAM-SHA-256 credentials (EOF): check the SASL mechanism, username and password", lines[0])
		require.NotContains(t, stderr, "battery staple")
		require.Less(t, time.Since(start), 15*time.Second)
	})

	t.Run("tls flags without brokers", func(t *testing.T) {
		code, _, stderr := proctest.Run(t, 30*time.Second, hookd, []string{"DATABASE_URL=" + db.URL},
			"run", "--kafka-tls-ca", ca.File, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
		require.Equal(t, 2, code, stderr)
		require.Equal(t, "hookd: kafka tls/sasl flags need --brokers: the embedded broker speaks plaintext on loopback only", strings.TrimSpace(stderr))
	})

	env = append(env, "HOOKD_KAFKA_SASL_PASSWORD=correct horse", "HOOKD_RELAY_SLOT="+db.Name) // slots are cluster-wide
	p := proctest.Start(t, hookd, env, "run", "--log-format", "json")
	p.WaitReady(httpAddr, 60*time.Second)

	// An admin client of our own, with the same credentials.
	tlsCfg := tlstest.ServerConfig(srv, nil).Clone()
	tlsCfg.Certificates, tlsCfg.RootCAs = nil, ca.Pool
	adminCl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DialTLSConfig(tlsCfg),
		kgo.SASL(scram.Auth{User: "hookd", Pass: "correct horse"}.AsSha256Mechanism()))
	require.NoError(t, err)
	defer adminCl.Close()
	adm := kadm.NewClient(adminCl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	details, err := adm.ListTopics(ctx, "webhooks.events", "webhooks.deliveries", "webhooks.retry.2m", "webhooks.dlq")
	require.NoError(t, err)
	require.Len(t, details, 4)
	for name, d := range details {
		require.NoError(t, d.Err, name)
		for _, part := range d.Partitions {
			require.Len(t, part.Replicas, 3, "%s: replication factor 3 with --brokers", name)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "webhooks.events", "webhooks.dlq")
	require.NoError(t, err)
	for _, rc := range rcs {
		c, err := rc.Configs, rc.Err
		require.NoError(t, err)
		got := ""
		for _, kv := range c {
			if kv.Key == "min.insync.replicas" && kv.Value != nil {
				got = *kv.Value
			}
		}
		require.Equal(t, "2", got, "%s: min.insync.replicas", rc.Name)
	}

	code, out, stderr := proctest.Run(t, 30*time.Second, hookctl, env, "topics", "list")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "webhooks.retry.2m")

	p.Signal(syscall.SIGTERM)
	require.Equal(t, 0, p.Wait(30*time.Second), p.Stderr())
}
