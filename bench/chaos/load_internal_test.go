package chaos

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A broker outage fails the records of some partitions (their batches were
// never sent before the produce's context ended) while others, in flight,
// are acknowledged after the broker is back: ProduceSync then reports the
// failures first. Each event must get its own record's outcome.
func TestSettleIngressMatchesResultsByRecord(t *testing.T) {
	l := NewLedger()
	recs := []*kgo.Record{
		{Key: []byte("a"), Value: []byte("e0")},
		{Key: []byte("b"), Value: []byte("e1")},
		{Value: []byte("not json")},
	}
	ids := []string{"e0", "e1"}
	failed := errors.New("context deadline exceeded")
	// Completion order: e1 failed, the invalid envelope acked, e0 acked.
	res := kgo.ProduceResults{{Record: recs[1], Err: failed}, {Record: recs[2]}, {Record: recs[0]}}
	if err := settleIngress(l, recs, ids, "not json", res); !errors.Is(err, failed) {
		t.Fatalf("settleIngress returned %v, want the failure", err)
	}
	got := l.Snapshot()
	if got["e0"].State != StateCommitted || got["e0"].Account != "a" {
		t.Errorf("e0 (acknowledged) = %+v, want committed, account a", got["e0"])
	}
	if got["e1"].State != StateUncertain || got["e1"].Account != "b" {
		t.Errorf("e1 (failed) = %+v, want uncertain, account b", got["e1"])
	}
	if !l.Invalid()["not json"] {
		t.Errorf("the acknowledged invalid envelope is not in the ledger")
	}
}

// Counts follows each event's latest state: an event first uncertain, then
// committed, counts once, as committed.
func TestLedgerCountsFollowStateChanges(t *testing.T) {
	l := NewLedger()
	l.set("e0", EventInfo{State: StateUncertain})
	l.set("e1", EventInfo{State: StateRolledBack})
	l.set("e2", EventInfo{State: StateUncertain})
	l.set("e0", EventInfo{State: StateCommitted})
	if c, r, u := l.Counts(); c != 1 || r != 1 || u != 1 {
		t.Fatalf("Counts() = %d committed, %d rolled back, %d uncertain; want 1, 1, 1", c, r, u)
	}
}

// The generator's events: ids as before (prefix, kind, batch, index) and a
// data object that is valid JSON carrying the whole pad.
func TestEventIDAndData(t *testing.T) {
	if got := eventID("sat", "_o", 12, 3); got != "sat_o12_3" {
		t.Errorf("eventID = %q, want sat_o12_3", got)
	}
	var data struct {
		Seq int    `json:"seq"`
		I   int    `json:"i"`
		Pad string `json:"pad"`
	}
	raw := eventData(7, 4, `"pp\"p"`)
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatalf("eventData %s is not JSON: %v", raw, err)
	}
	if data.Seq != 7 || data.I != 4 || data.Pad != `pp"p` {
		t.Errorf("eventData decoded to %+v, want seq 7, i 4, pad pp\"p", data)
	}
}
