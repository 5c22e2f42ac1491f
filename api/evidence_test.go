package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// GET /v1/deliveries/{id} shows each attempt's evidence: where it was sent
// and the SHA-256 of the bytes sent. A malformed digest on the attempts
// topic is dropped, not allowed to fail the batch.
func TestDeliveryAttemptsCarryEvidence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now().UTC()
	sum := sha256.Sum256([]byte(`{"id":"evt_ev"}`))
	digest := hex.EncodeToString(sum[:])
	id := delivery.ID("evt_ev", b.epA)
	base := attempt.Record{DeliveryID: id, EventID: "evt_ev", EventType: "invoice.paid", EndpointID: b.epA,
		Account: "acct_a", EventCreated: now, Tier: b.names.Deliveries, Duration: time.Millisecond, StatusCode: 503,
		Outcome: attempt.OutcomeRetry, ErrorClass: "http_5xx", NextAction: attempt.NextRetry, NextDueAt: now.Add(time.Minute),
		Destination: "https://a.example.com/hook"}
	first, second := base, base
	first.AttemptID, first.Attempt, first.StartedAt, first.BodySHA256 = "att_ev1", 1, now, digest
	second.AttemptID, second.Attempt, second.StartedAt, second.BodySHA256 = "att_ev2", 2, now.Add(time.Second), "not-a-digest"
	_, err := b.db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: []*attempt.Record{&first, &second}, Now: now})
	require.NoError(t, err)

	var tl deliveryOut
	require.Equal(t, 200, b.do(t, b.tokA, "GET", "/v1/deliveries/"+id, "", &tl))
	require.Len(t, tl.Timeline, 2)
	require.Equal(t, "https://a.example.com/hook", tl.Timeline[0].Destination)
	require.Equal(t, digest, tl.Timeline[0].BodySHA256)
	require.Equal(t, "https://a.example.com/hook", tl.Timeline[1].Destination)
	require.Empty(t, tl.Timeline[1].BodySHA256, "a malformed digest is not stored")
}
