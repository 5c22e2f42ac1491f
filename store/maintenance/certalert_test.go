package maintenance_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/clock/fakeclock"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/tlstest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store/maintenance"
)

// An endpoint's client certificate expiring within 14 days gets one
// hookd.endpoint.certificate_expiring alert for its account; one expiring
// later gets none, and a warned certificate is not warned about again.
func TestCertificateExpiringAlert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tcfg := topics.Config{Partitions: 1}
	names := topics.NamesFor(tcfg)
	kafka := kafkatest.NewProvisioned(t, tcfg)
	db := pgtest.New(t)
	c := tlstest.NewCA(t).Client(t, "hookd") // expires in a day
	certPEM, err := os.ReadFile(c.CertFile)
	require.NoError(t, err)
	keyPEM, err := os.ReadFile(c.KeyFile)
	require.NoError(t, err)
	for _, id := range []string{"ep-soon", "ep-later"} {
		_, err := db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: id, Account: "acct_1", URL: "https://example.com/" + id,
			Secrets: []string{endpoint.NewSecret()}, ClientCert: string(certPEM), ClientKey: string(keyPEM)})
		require.NoError(t, err)
	}
	now := time.Now()
	// ep-later's expiry as a certificate valid for 30 more days would have it.
	_, err = db.Store.Pool().Exec(ctx, `UPDATE webhooks.endpoints SET client_cert_not_after = $1 WHERE id = 'ep-later'`,
		now.Add(30*24*time.Hour))
	require.NoError(t, err)

	mon, err := maintenance.NewMonitor(maintenance.MonitorConfig{OpsTopic: names.Ops, EventsTopic: names.Events, Interval: 50 * time.Millisecond},
		maintenance.MonitorDeps{Store: db.Store, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
			Clock: fakeclock.New(now), KafkaOpts: []kgo.Opt{kgo.SeedBrokers(kafka.Addrs...)}})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mon.Run(runCtx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	// Warned once: the mark is written after the alert is produced.
	deadline := time.Now().Add(20 * time.Second)
	for {
		owed, err := db.Store.CertsToWarn(ctx, now.Add(endpoint.ClientCertWarning), 10)
		require.NoError(t, err)
		if len(owed) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "still owed: %v", owed)
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	recs := readAll(t, kafka, names.Events)
	var alerts []maintenance.Alert
	for _, r := range recs {
		var a maintenance.Alert
		require.NoError(t, json.Unmarshal(r.Value, &a))
		if a.Type == maintenance.AlertCertExpiring {
			alerts = append(alerts, a)
		}
	}
	require.Len(t, alerts, 1, "one alert, for ep-soon only")
	a := alerts[0]
	require.Equal(t, "ep-soon", a.Data.EndpointID)
	require.Equal(t, "acct_1", a.Account)
	require.WithinDuration(t, now.Add(23*time.Hour), a.Data.ClientCertExpiresAt, 2*time.Hour)
	require.Equal(t, "/portal/endpoints/ep-soon", a.Data.PortalURL)
	require.NotContains(t, string(recs[0].Value), "PRIVATE KEY")
}

// readAll reads topic from its start until a poll brings nothing more.
func readAll(t *testing.T, c *kafkatest.Cluster, topic string) []*kgo.Record {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		n := len(fs.Records())
		out = append(out, fs.Records()...)
		if n == 0 {
			return out
		}
	}
}
