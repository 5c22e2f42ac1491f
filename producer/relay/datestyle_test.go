package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/producer/event"
)

// A database (or role) with a DateStyle other than ISO still relays its
// outbox rows with their created_at: the replication connection asks for
// ISO, the only output the row decoding reads. Fails when the relay's
// session inherits 'SQL, DMY' ("01/12/2026 00:20:00.12 UTC").
func TestNonISODateStyleIsRelayed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	_, err := e.db.Store.Pool().Exec(ctx,
		`DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET DateStyle = %L', current_database(), 'SQL, DMY'); END $$`)
	require.NoError(t, err)
	events := collect(t, e.kafka, e.names.Events)
	start(t, e.newRelay(t, e.relayConfig()).Run)
	e.waitStreaming(t)

	before := time.Now().Add(-time.Minute)
	e.insert(t, "evt_datestyle", "acct_1", "invoice.paid", true)
	var env event.Envelope
	waitFor(t, "the event on the events topic", 20*time.Second, func() bool {
		events.mu.Lock()
		defer events.mu.Unlock()
		for _, r := range events.recs {
			got, err := event.Parse(r.Value, event.Origin{}, 0)
			if err == nil && got.ID == "evt_datestyle" {
				env = got
				return true
			}
		}
		return false
	})
	require.True(t, env.Created.After(before) && env.Created.Before(time.Now().Add(time.Minute)),
		"created %v, not the row's created_at", env.Created)
}
