package portal

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

// Issue 32: a delivered delivery's page shows its payload, read from the
// deliveries topic; Resend with a reason brings the same webhook-id to the
// receiver again, signed afresh, and the replay audit lists it. While the
// account's replay slots are all taken, Resend is refused and sends nothing.
func TestBrowserPayloadAndResend(t *testing.T) {
	browser := newBrowser(t)
	b := setup(t, setupOpts{cfg: Config{Name: "Acme Billing"}})
	b.startPipeline(t)
	ctx := context.Background()
	secret := endpoint.NewSecret()
	rc := newReceiver(t, secret)
	rc.setFail(false)
	e, err := b.db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: endpoint.NewID(), Account: "acct_a", URL: rc.srv.URL + "/hooks",
		Secrets: []string{secret}, EventTypes: []string{"invoice.*"}})
	require.NoError(t, err)
	evt, err := b.h.sendTest(ctx, e, "invoice.paid", "seed")
	require.NoError(t, err)
	var d store.Delivery
	wait.For(t, 30*time.Second, "the event delivered and logged", func() bool {
		ds, err := b.db.Store.DeliveriesOfEvent(ctx, "acct_a", evt)
		require.NoError(t, err)
		if len(ds) == 1 && ds[0].Status == "delivered" && ds[0].RecordOffset != nil {
			d = ds[0]
			return true
		}
		return false
	})
	require.Equal(t, 1, rc.count(evt))

	tb := b.tab(t, browser, false)
	require.Equal(t, 200, tb.open("/portal/login/"+b.link(t, "acct_a", "", store.PortalManage, time.Hour)))
	require.Equal(t, 200, tb.click(`form[action="/portal/login"] button`))
	require.Equal(t, 200, tb.open("/portal/deliveries/"+d.ID))
	page := tb.text()
	require.Contains(t, page, `"sent_from": "the Acme Billing delivery portal"`, "the payload as indented JSON")
	require.Contains(t, page, "Shown from its delivery record in Kafka")
	require.NotContains(t, page, "not kept where the portal can read it")
	tb.shot("delivery-payload")

	// The account's replay slots busy (resends of the API, replays):
	// refused plainly, nothing sent, as the API answers 429.
	require.True(t, b.h.slots.AcquireReplay("acct_a"))
	require.True(t, b.h.slots.AcquireReplay("acct_a"))
	tb.set("#resend-reason", "we lost it, please resend")
	require.Equal(t, 200, tb.click(`form[action$="/resend"] button`))
	require.Contains(t, tb.text(), "Too many replays and resends are running for this account right now. Nothing was sent")
	rs, err := b.db.Store.ListPortalReplays(ctx, "acct_a", "", 10)
	require.NoError(t, err)
	require.Empty(t, rs)
	b.h.slots.ReleaseReplay("acct_a")

	tb.set("#resend-reason", "we lost it, please resend")
	require.Equal(t, 200, tb.click(`form[action$="/resend"] button`))
	require.Contains(t, tb.text(), "Resent (rpl_dv_")
	require.True(t, b.h.slots.AcquireReplay("acct_a"), "the resend gave its slot back")
	b.h.slots.ReleaseReplay("acct_a")
	b.h.slots.ReleaseReplay("acct_a")
	wait.For(t, 30*time.Second, "the resent webhook-id at the receiver", func() bool { return rc.count(evt) == 2 })
	require.True(t, rc.delivered(evt))
	rc.mu.Lock()
	for _, g := range rc.got {
		require.True(t, g.Verified, "every request carries a valid signature")
	}
	rc.mu.Unlock()
	wait.For(t, 30*time.Second, "the resend's attempt in the log", func() bool {
		as, err := b.db.Store.AttemptsOfDelivery(ctx, "acct_a", d.ID, 0)
		require.NoError(t, err)
		return len(as) == 2 && as[1].ReplayID != ""
	})
	require.Equal(t, 200, tb.open("/portal/replays"))
	audit := tb.text()
	require.Contains(t, audit, "we lost it, please resend")
	require.Contains(t, audit, "delivery")
	tb.shot("replays-resend")
}
