package attemptlog_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/metrictest"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/store/attemptlog"
)

// lockedBuffer collects log lines written from the writer's goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) lines(substr string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// Issue 11 item 1, at the attempt log: account B's delivery and its retry,
// made at endpoint ep_shared after account A took that id over, must not
// mark B's delivery delivered, touch A's endpoint health, or show under A.
func TestWriterKeepsAnotherAccountsRecordsOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &lockedBuffer{}
	b.logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	_, err := b.db.Store.Pool().Exec(context.Background(), `INSERT INTO webhooks.endpoints (id, account, url, secrets)
		VALUES ('ep_shared', 'acct_a', 'http://127.0.0.1:1/a', '{whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}')`)
	require.NoError(t, err)

	dlv := delivery.ID("evt_b", "ep_shared")
	d := delivery.Delivery{ID: dlv, EventID: "evt_b", EventType: "invoice.paid", EndpointID: "ep_shared", Account: "acct_b",
		EventCreated: t0, Attempt: 2, Body: []byte(`{}`)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Retry[0])).FirstErr())
	// What the dispatcher produced before it checked accounts: B's retry,
	// POSTed to A's receiver, answered 200.
	b.produce(t, &attempt.Record{AttemptID: "att_b_2", DeliveryID: dlv, EventID: "evt_b", EventType: "invoice.paid",
		EndpointID: "ep_shared", Account: "acct_b", EventCreated: t0, Attempt: 2, Tier: b.names.Retry[0],
		StartedAt: t0.Add(time.Minute), Duration: time.Millisecond, StatusCode: 200, Outcome: attempt.OutcomeDelivered,
		NextAction: attempt.NextDone})
	// And a pending delivery record of B on the deliveries topic.
	d2 := d
	d2.ID, d2.EventID, d2.Attempt = delivery.ID("evt_b2", "ep_shared"), "evt_b2", 1
	require.NoError(t, b.producer.ProduceSync(ctx, d2.Record(b.names.Deliveries)).FirstErr())

	b.startWriter(t, attemptlog.Config{}, b.reg)
	eventually(t, 20*time.Second, "B's attempt and pending row written", func() bool {
		return b.queryInt(t, `SELECT count(*) FROM webhooks.attempts WHERE attempt_id = 'att_b_2'`) == 1 &&
			b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE id = $1`, d2.ID) == 1
	})
	require.Zero(t, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered'`),
		"B's delivery is not delivered by A's receiver")
	require.Zero(t, b.queryInt(t, `SELECT count(*) FROM webhooks.endpoint_health WHERE endpoint_id = 'ep_shared'`),
		"A's endpoint health untouched")
	require.Zero(t, b.queryInt(t, `SELECT count(*) FROM webhooks.deliveries WHERE account = 'acct_a'`))
	ds, err := b.db.Store.ListDeliveries(context.Background(), store.ListDeliveriesParams{EndpointID: "ep_shared"})
	require.NoError(t, err)
	require.Empty(t, ds, "B's rows never list under A's endpoint")

	require.Equal(t, 1, b.queryInt(t, `SELECT count(*) FROM webhooks.attempts WHERE attempt_id = 'att_b_2' AND account = 'acct_b'`),
		"logged under B's account")

	eventually(t, 10*time.Second, "one WARN per mismatched record", func() bool {
		return len(logs.lines("account is not its endpoint's")) == 2
	})
	warn := logs.lines("att_b_2")
	require.Len(t, warn, 1)
	for _, want := range []string{"level=WARN", "delivery_id=" + dlv, "endpoint_id=ep_shared", "account=acct_b", "owner_account=acct_a"} {
		require.Contains(t, warn[0], want)
	}
	require.Equal(t, 2.0, metrictest.Value(t, b.reg, "hookd_attempt_log_records_total", "account_mismatch"))
}
