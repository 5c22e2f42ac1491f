package dispatcher_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
)

// A second member joins while a request hangs on every partition. The
// first member's revoke waits for them at most RevokeTimeout in all (not
// RevokeTimeout for the first and without bound for the others), so the
// rebalance completes and the new member starts. Nothing is lost: the
// hung records, unfinished, are attempted again by their new owner; the
// duplicates are bounded by the records at or after each revoked
// watermark, and every record completes. Fails when each wait of revoke
// has its own deadline (the timer fires once, the next waits block).
func TestRevokeWithHungRequestsIsBounded(t *testing.T) {
	const parts, perPart = 4, 5
	b := setup(t, setupOpts{partitions: parts})
	var hang atomic.Bool
	hang.Store(true)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() && strings.HasPrefix(r.Header.Get("webhook-id"), "evt_hang") {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.WriteHeader(http.StatusOK)
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	var ids, evs []string
	for p := range int32(parts) {
		// A hung request first, so it holds the watermark, then records
		// of another endpoint that are delivered meanwhile.
		hung := fmt.Sprintf("ep_hang_%d", p)
		b.eps.set(dispatcher.Target{ID: hung, URL: rc.srv.URL})
		d := newDelivery(fmt.Sprintf("evt_hang_%d", p), hung)
		ids, evs = append(ids, d.ID), append(evs, d.EventID)
		b.produce(p, d)
		ok := fmt.Sprintf("ep_ok_%d", p)
		b.eps.set(dispatcher.Target{ID: ok, URL: rc.srv.URL})
		for i := range perPart - 1 {
			d := newDelivery(fmt.Sprintf("evt_%d_%d", p, i), ok)
			ids, evs = append(ids, d.ID), append(evs, d.EventID)
			b.produce(p, d)
		}
	}
	cfg := dispatcher.Config{
		Group: "g-revoke", AllowPrivateNetworks: true,
		RevokeTimeout: 2 * time.Second, Timeout: 50 * time.Second, DrainTimeout: time.Second,
	}
	logA, logB := &logBuffer{}, &logBuffer{}
	stopA := b.start(cfg, runOpts{log: logA})
	eventually(t, 30*time.Second, func() bool { return rc.inFlight.Load() == parts }, "a request hung on every partition")
	eventually(t, 30*time.Second, func() bool { return rc.distinct() == parts*perPart }, "the other records delivered")

	stopB := b.start(cfg, runOpts{log: logB})
	eventually(t, 15*time.Second, func() bool { return logA.count("partitions released") >= 1 },
		"the first member's revoke returned (RevokeTimeout is 2s; the hung requests never end by themselves)")
	eventually(t, 15*time.Second, func() bool { return logB.count("partitions assigned") >= 1 }, "the new member assigned")
	require.Equal(t, 1, logA.count("level=WARN", "revoke timed out", "partitions_busy="))

	hang.Store(false)
	close(release)
	eventually(t, 60*time.Second, func() bool {
		sum, _ := b.committed("g-revoke", b.names.Deliveries)
		return sum == parts*perPart
	}, "offsets committed to the end: no record left unfinished or skipped")
	for i, id := range ids {
		require.GreaterOrEqual(t, rc.count(evs[i]), 1, "event %s never received", evs[i])
		eventually(t, 30*time.Second, func() bool {
			for _, a := range b.col.attemptsFor(id) {
				if a.Outcome == attempt.OutcomeDelivered {
					return true
				}
			}
			return false
		}, "a delivered attempt record for %s", id)
	}
	dups := rc.total() - parts*perPart
	t.Logf("duplicates: %d (bound %d)", dups, parts*perPart)
	require.LessOrEqual(t, dups, parts*perPart, "duplicates bounded by the records at or after the revoked watermarks")
	stopB()
	stopA()
}
