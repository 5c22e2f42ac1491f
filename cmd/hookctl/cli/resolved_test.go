package cli_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/store"
)

// deliveredByReplay records, as the attempt-log writer would, that event
// evt's dead delivery to ep was delivered by replay replayID.
func (e *env) deliveredByReplay(t *testing.T, evt, ep, account, replayID string) {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	base := attempt.Record{DeliveryID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep,
		Account: account, EventCreated: now.Add(-time.Hour), Duration: 20 * time.Millisecond}
	died, replayed := base, base
	died.AttemptID, died.Attempt, died.Tier, died.StartedAt = evt+"-a3", 3, e.names.Retry[0], now.Add(-time.Minute)
	died.StatusCode, died.Outcome, died.ErrorClass, died.NextAction = 500, attempt.OutcomeRetry, "http_5xx", attempt.NextDeadLetter
	died.DLQ, died.DeadReason = &attempt.Position{Topic: e.names.DLQ, Partition: 0, Offset: 0}, "retries_exhausted"
	replayed.AttemptID, replayed.Attempt, replayed.Tier, replayed.StartedAt = evt+"-r1", 1, e.names.Deliveries, now
	replayed.StatusCode, replayed.Outcome, replayed.NextAction, replayed.ReplayID = 200, attempt.OutcomeDelivered, attempt.NextDone, replayID
	_, err := e.db.Store.WriteAttempts(context.Background(), store.WriteAttemptsParams{Records: []*attempt.Record{&died, &replayed}, Now: now})
	require.NoError(t, err)
}

// deadAgain produces a new dead letter of event evt's delivery to ep, a
// second after now: the death of a replayed record.
func (e *env) deadAgain(t *testing.T, evt, ep, account string) {
	t.Helper()
	now := time.Now()
	body, err := delivery.Body(evt, "invoice.paid", now, []byte(`{}`))
	require.NoError(t, err)
	d := delivery.Delivery{ID: delivery.ID(evt, ep), EventID: evt, EventType: "invoice.paid", EndpointID: ep, Account: account,
		EventCreated: now, Attempt: 3, Body: body}
	src := d.Record(e.names.Retry[0])
	rec := deadletter.Record(e.names.DLQ, src, deadletter.Provenance{OriginTopic: src.Topic, Attempts: 3,
		LastStatus: 500, ErrorClass: "http_5xx", Reason: deadletter.ReasonRetriesExhausted, DeadAt: now})
	rec.Partition, rec.Timestamp = partitionOf(ep, e.parts), now.Add(time.Second)
	cl := e.cluster.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	require.NoError(t, cl.ProduceSync(context.Background(), rec).FirstErr())
}

// Issue 13 item 3: a dead letter that an earlier replay delivered is
// resolved; a later resend skips it (the dry run says so) unless
// --include-resolved. So is one the replay sent, though not delivered yet
// (issue 32); its death after the replay is a new dead letter, resent.
func TestResendSkipsDeadLettersAReplayDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.endpoint(t, "ep_r", "acct_r", false)
	ids := e.deadLetters(t, "ep_r", "acct_r", "invoice.paid", 2)

	code, out, errOut := e.run(t, "dlq", "replay", "--reason", "INC-9", "--actor", "ann", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var first struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &first))
	require.Equal(t, map[string]int{ids[0]: 1, ids[1]: 1}, e.replayedEvents(t))
	// The replay of the first reached the receiver; the second failed
	// again: a new dead letter.
	e.deliveredByReplay(t, ids[0], "ep_r", "acct_r", first.ID)
	e.deadAgain(t, ids[1], "ep_r", "acct_r")

	code, out, errOut = e.run(t, "endpoints", "resend", "ep_r", "--since", "1h", "--actor", "ann", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "would replay 1 of 3 matching dead letter(s); 2 would be skipped")
	require.Contains(t, out, "skip: already delivered")
	require.Contains(t, out, "skipped 2 dead letter(s) already delivered")

	code, out, errOut = e.run(t, "endpoints", "resend", "ep_r", "--since", "1h", "--actor", "ann", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var res struct {
		Replayed, Skipped int
		Skips             map[string]int
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, 1, res.Replayed)
	require.Equal(t, map[string]int{"already_delivered": 2}, res.Skips)
	require.Equal(t, map[string]int{ids[0]: 1, ids[1]: 2}, e.replayedEvents(t), "only the new death is sent again")

	code, out, errOut = e.run(t, "endpoints", "resend", "ep_r", "--since", "1h", "--actor", "ann", "--include-resolved")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "3 replayed, 0 skipped")
	require.Equal(t, map[string]int{ids[0]: 2, ids[1]: 4}, e.replayedEvents(t))
}

// Issue 32: endpoints resend run right after dlq replay sent the dead
// letters the replay had just sent again, as the delivery log did not say
// delivered yet. The replay's own record of what it sent resolves them.
func TestResendRightAfterReplaySendsNothingAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.endpoint(t, "ep_q", "acct_q", false)
	ids := e.deadLetters(t, "ep_q", "acct_q", "invoice.paid", 5)

	code, _, errOut := e.run(t, "dlq", "replay", "--endpoint", "ep_q", "--reason", "INC-10", "--actor", "ann")
	require.Equal(t, 0, code, errOut)
	code, out, errOut := e.run(t, "endpoints", "resend", "ep_q", "--since", "1h", "--actor", "ann", "-o", "json")
	require.Equal(t, 0, code, errOut)
	var res struct {
		Replayed int
		Skips    map[string]int
	}
	require.NoError(t, json.Unmarshal([]byte(out), &res))
	require.Equal(t, 0, res.Replayed, out)
	require.Equal(t, map[string]int{"already_delivered": 5}, res.Skips)
	want := map[string]int{}
	for _, id := range ids {
		want[id] = 1
	}
	require.Equal(t, want, e.replayedEvents(t), "each dead letter sent once, by the replay")
}
