package replay

import (
	"strings"
	"testing"
	"time"

	"github.com/hookd/hookd/deadletter"
)

// An outbox row the relay dead-lettered as a summary lists with its
// account, event and outbox id, as unreplayable, instead of as a malformed
// delivery (its key is the account, not an endpoint).
func TestSummaryDeadLetterDecodes(t *testing.T) {
	r := deadletter.SummaryRecord("webhooks.dlq", []byte("acct_1"),
		deadletter.Summary{OutboxID: "evt_row", EventID: "evt_row", Account: "acct_1", EventType: "invoice.paid", Size: 2 << 20, Limit: 256 << 10},
		deadletter.Provenance{Reason: deadletter.ReasonOversize, ErrorClass: "oversize", DeadAt: time.Now()})
	e := decode(r)
	if e.Account != "acct_1" || e.EventID != "evt_row" || e.EventType != "invoice.paid" || e.EndpointID != "" {
		t.Fatalf("decoded %+v", e)
	}
	if e.Reason != deadletter.ReasonOversize || !strings.Contains(e.Unreplayable, "outbox row evt_row") {
		t.Fatalf("reason %q, unreplayable %q", e.Reason, e.Unreplayable)
	}
	if strings.Contains(e.Unreplayable, "malformed") {
		t.Fatalf("a summary is not a malformed record: %q", e.Unreplayable)
	}
}
