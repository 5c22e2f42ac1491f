package chaos

import (
	"sync"
	"time"
)

// EventInfo is one event of the ledger.
type EventInfo struct {
	Account string
	State   EventState
	// At is when the commit returned or the broker acknowledged.
	At time.Time
	// Outbox is true for outbox events, false for ingress ones.
	Outbox bool
}

// Ledger is every event the load generator produced.
//
// It is held without pointers: a key of up to maxKeyLen bytes inline, the
// account as an index into the ledger's accounts, the time in nanoseconds
// after the ledger's epoch.
// hookbench's saturation phase puts ~450,000 events in it on the machine
// hookd is measured on; held as map[string]*EventInfo (three pointers and
// an allocation per event) it was a quarter of hookbench's live heap, which
// its garbage collector scanned on every cycle, and setting an event was 5%
// of hookbench's CPU: a cost of the harness that only hookd's phases paid
// (B0 and River's B2 keep no ledger).
type Ledger struct {
	mu sync.Mutex
	// epoch is when the ledger was made: times are kept as nanoseconds
	// after it, and rebuilt from it, so that they keep their monotonic
	// clock reading (latencies are differences of them).
	epoch    time.Time
	events   map[ledgerKey]ledgerEntry
	long     map[string]ledgerEntry // ids longer than maxKeyLen
	accounts []string
	acctIdx  map[string]int32
	invalid  map[string]bool // values of invalid envelopes produced and acknowledged
	// byState counts events by state, kept as they change: Counts is read
	// every second while the generator runs, and iterating every event
	// under mu held up the generator.
	byState map[EventState]int
}

// maxKeyLen is the longest event id held inline; the generator's are
// prefix, kind, batch and index: "saturation_o123456_49" is 21 bytes.
const maxKeyLen = 47

type ledgerKey struct {
	n  uint8
	id [maxKeyLen]byte
}

type ledgerEntry struct {
	at      int64 // nanoseconds after the ledger's epoch, if timed
	account int32
	state   uint8 // an EventState
	outbox  bool
	timed   bool // false for the zero time
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{epoch: time.Now(), events: map[ledgerKey]ledgerEntry{}, long: map[string]ledgerEntry{},
		acctIdx: map[string]int32{}, invalid: map[string]bool{}, byState: map[EventState]int{}}
}

// keyOf is id's inline key; false if id is longer than maxKeyLen.
func keyOf(id string) (ledgerKey, bool) {
	var k ledgerKey
	if len(id) > maxKeyLen {
		return k, false
	}
	k.n = uint8(len(id))
	copy(k.id[:], id)
	return k, true
}

// String is the event id.
func (k *ledgerKey) String() string { return string(k.id[:k.n]) }

// setLocked records an event's latest state; l.mu must be held.
func (l *Ledger) setLocked(id string, info EventInfo) {
	e := ledgerEntry{account: l.account(info.Account), state: uint8(info.State), outbox: info.Outbox}
	if !info.At.IsZero() {
		e.at, e.timed = int64(info.At.Sub(l.epoch)), true
	}
	l.byState[info.State]++
	if k, ok := keyOf(id); ok {
		if old, had := l.events[k]; had {
			l.byState[EventState(old.state)]--
		}
		l.events[k] = e
		return
	}
	if old, had := l.long[id]; had {
		l.byState[EventState(old.state)]--
	}
	l.long[id] = e
}

// setBatch records the same state for ids[i] of accounts[i], under one
// lock.
func (l *Ledger) setBatch(ids, accounts []string, state EventState, at time.Time, outbox bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, id := range ids {
		l.setLocked(id, EventInfo{Account: accounts[i], State: state, At: at, Outbox: outbox})
	}
}

// account is a's index in l.accounts, added if new; l.mu must be held.
func (l *Ledger) account(a string) int32 {
	if i, ok := l.acctIdx[a]; ok {
		return i
	}
	i := int32(len(l.accounts))
	l.accounts = append(l.accounts, a)
	l.acctIdx[a] = i
	return i
}

// info is the EventInfo of an entry.
func (l *Ledger) info(e ledgerEntry) EventInfo {
	info := EventInfo{Account: l.accounts[e.account], State: EventState(e.state), Outbox: e.outbox}
	if e.timed {
		info.At = l.epoch.Add(time.Duration(e.at))
	}
	return info
}

// Get returns an event's latest state.
func (l *Ledger) Get(id string) (EventInfo, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var e ledgerEntry
	var ok bool
	if k, short := keyOf(id); short {
		e, ok = l.events[k]
	} else {
		e, ok = l.long[id]
	}
	if !ok {
		return EventInfo{}, false
	}
	return l.info(e), true
}

// Each calls fn with every event, in no order, holding the ledger: fn must
// not call the ledger's methods.
func (l *Ledger) Each(fn func(id string, e EventInfo)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, e := range l.events {
		fn(k.String(), l.info(e))
	}
	for id, e := range l.long {
		fn(id, l.info(e))
	}
}

// Len is the number of events.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.events) + len(l.long)
}

// Snapshot returns a copy of the ledger's events.
func (l *Ledger) Snapshot() map[string]EventInfo {
	out := make(map[string]EventInfo, l.Len())
	l.Each(func(id string, e EventInfo) { out[id] = e })
	return out
}

// Invalid returns the values of the invalid envelopes the broker
// acknowledged.
func (l *Ledger) Invalid() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.invalid))
	for k := range l.invalid {
		out[k] = true
	}
	return out
}

// Counts returns how many events are in each state.
func (l *Ledger) Counts() (committed, rolledBack, uncertain int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for st, n := range l.byState {
		switch st {
		case StateCommitted:
			committed += n
		case StateRolledBack:
			rolledBack += n
		default:
			uncertain += n
		}
	}
	return
}
