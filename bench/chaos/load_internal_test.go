package chaos

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

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

// The ledger holds short ids inline and longer ones apart; both come back
// with their account, state, time and path, and a state change replaces
// the event rather than adding one.
func TestLedgerKeepsEveryEventAsSet(t *testing.T) {
	l := NewLedger()
	long := strings.Repeat("x", maxKeyLen+1)
	long2 := long[:maxKeyLen] + "y" // the same first maxKeyLen bytes
	inline := strings.Repeat("z", maxKeyLen)
	at := time.Date(2026, 12, 2, 6, 0, 0, 123456789, time.UTC)
	l.setBatch([]string{"e0", long, "e2"}, []string{"a", "b", "a"}, StateUncertain, time.Time{}, true)
	l.set(long, EventInfo{Account: "b", State: StateCommitted, At: at})
	l.set("e2", EventInfo{Account: "a", State: StateRolledBack, At: at, Outbox: true})
	l.set(long2, EventInfo{Account: "c", State: StateRolledBack})
	l.set(inline, EventInfo{Account: "c", State: StateUncertain, At: at})
	want := map[string]EventInfo{
		"e0":   {Account: "a", State: StateUncertain, Outbox: true},
		long:   {Account: "b", State: StateCommitted, At: at},
		"e2":   {Account: "a", State: StateRolledBack, At: at, Outbox: true},
		long2:  {Account: "c", State: StateRolledBack},
		inline: {Account: "c", State: StateUncertain, At: at},
	}
	got := l.Snapshot()
	if len(got) != len(want) || l.Len() != len(want) {
		t.Fatalf("Snapshot has %d events, Len %d; want %d", len(got), l.Len(), len(want))
	}
	for id, w := range want {
		g, ok := l.Get(id)
		if !ok || g.Account != w.Account || g.State != w.State || !g.At.Equal(w.At) || g.Outbox != w.Outbox {
			t.Errorf("Get(%.10q) = %+v, %v; want %+v", id, g, ok, w)
		}
		if s := got[id]; s.Account != w.Account || s.State != w.State || !s.At.Equal(w.At) || s.Outbox != w.Outbox {
			t.Errorf("Snapshot()[%.10q] = %+v; want %+v", id, s, w)
		}
	}
	if _, ok := l.Get("e9"); ok {
		t.Errorf("Get of an event never set found one")
	}
	if c, r, u := l.Counts(); c != 1 || r != 2 || u != 2 {
		t.Errorf("Counts() = %d, %d, %d; want 1, 2, 2", c, r, u)
	}
	// A time read back keeps its monotonic reading: differences of times
	// taken now are not moved by a step of the wall clock.
	now := time.Now()
	l.set("e3", EventInfo{Account: "a", State: StateCommitted, At: now})
	if g, _ := l.Get("e3"); g.At.String() == g.At.Round(0).String() || !g.At.Equal(now) {
		t.Errorf("Get(e3).At = %v, want %v with its monotonic reading", g.At, now)
	}
}

// The hand-built ingress envelope is what encoding/json makes of it, for
// the generator's plain ids and for strings that need escaping.
func TestAppendEnvelopeMatchesEncodingJSON(t *testing.T) {
	data := eventData(7, 3, strconv.Quote("pad"))
	for _, s := range [][3]string{
		{"sat_i7_3", "acct_0001", "invoice.paid"},
		{`q"uote\back`, "<a&b>", "tab\there é\u2028"},
		{"<", ">", "&"},
		{"\x7f", "\xff", "\u2029"},
	} {
		got := appendEnvelope(nil, s[0], s[1], s[2], data)
		want, err := json.Marshal(struct {
			ID      string          `json:"id"`
			Account string          `json:"account"`
			Type    string          `json:"type"`
			Data    json.RawMessage `json:"data"`
		}{s[0], s[1], s[2], data})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("appendEnvelope = %s\nwant             %s", got, want)
		}
	}
}

// set records one event's latest state, as the generator's batches do.
func (l *Ledger) set(id string, info EventInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.setLocked(id, info)
}
