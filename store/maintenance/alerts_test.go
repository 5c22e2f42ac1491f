package maintenance_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/maintenance"
)

// Alerts have ids derived from what they are about (a re-run produces the
// same id), name manual and automatic disablements, and carry no URL.
func TestAlertFormat(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)
	auto := maintenance.DisabledAlert(store.DisabledEndpoint{ID: "ep_1", Account: "acct_1", URL: "https://x.example/h?token=s3cret",
		Description: "billing webhooks", Reason: "failing", Detail: "failing: failing continuously since ...", DisabledAt: at}, "https://hooks.example.com")
	require.Equal(t, "hookd.endpoint.disabled:ep_1:1767484800000000000", auto.ID)
	require.Equal(t, "automatic", auto.Data.Disabled)
	require.Equal(t, "billing webhooks", auto.Data.Description) // docs/topics.md: included when set
	require.Equal(t, "failing", auto.Data.Reason)
	require.Equal(t, "https://hooks.example.com/portal/endpoints/ep_1", auto.Data.PortalURL)
	manual := maintenance.DisabledAlert(store.DisabledEndpoint{ID: "ep_1", Account: "acct_1", Reason: "disabled in the portal by alice",
		Detail: "disabled in the portal by alice", DisabledAt: at}, "")
	require.Equal(t, "manual", manual.Data.Disabled)
	require.Equal(t, "disabled in the portal by alice", manual.Data.Reason)
	require.Equal(t, "/portal/endpoints/ep_1", manual.Data.PortalURL)

	recs, err := auto.Records("webhooks.events", "webhooks.ops")
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "acct_1", string(recs[0].Key))
	require.Equal(t, "ep_1", string(recs[1].Key))
	require.NotContains(t, string(recs[0].Value), "s3cret")
	var env map[string]any
	require.NoError(t, json.Unmarshal(recs[0].Value, &env))
	require.ElementsMatch(t, []string{"id", "account", "type", "data", "created"}, keys(env))

	hour := time.Date(2026, 1, 1, 1, 0, 0, 0, time.UTC)
	dl := maintenance.DeadLetteredAlert(store.DeadLetterAlert{EndpointID: "ep_2", Account: "acct_1", Hour: hour, Count: 42,
		SampleEventIDs: []string{"evt_1"}}, "")
	require.Equal(t, dl.ID, maintenance.DeadLetteredAlert(store.DeadLetterAlert{EndpointID: "ep_2", Account: "acct_1", Hour: hour,
		Count: 42}, "").ID, "one id per endpoint and hour")
	require.Equal(t, "/portal/deliveries?endpoint=ep_2&status=dead", dl.Data.PortalURL)
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestWarnAfterBelowDisableAfter(t *testing.T) {
	t.Parallel()
	deps := maintenance.MonitorDeps{Store: &store.Store{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()}
	_, err := maintenance.NewMonitor(maintenance.MonitorConfig{DisableAfter: time.Hour, WarnAfter: time.Hour}, deps)
	require.ErrorContains(t, err, "warn after: must be above 0 and below --disable-after (1h0m0s), got 1h0m0s")
	_, err = maintenance.NewMonitor(maintenance.MonitorConfig{WarnAfter: -time.Second}, deps)
	require.ErrorContains(t, err, "warn after")
	// The default follows a short --disable-after instead of refusing it.
	_, err = maintenance.NewMonitor(maintenance.MonitorConfig{DisableAfter: 2 * time.Hour}, maintenance.MonitorDeps{Store: &store.Store{},
		Logger: deps.Logger, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
}
