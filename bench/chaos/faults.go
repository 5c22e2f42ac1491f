package chaos

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// FaultKind says what a fault may cost in duplicates (issue 33).
type FaultKind int

// Fault kinds.
const (
	// FaultCrash is a kill -9 (then a restart): the faulted process may
	// cause as many duplicates as it had requests in flight.
	FaultCrash FaultKind = iota
	// FaultGraceful is a SIGTERM (then a restart, or not: a scale-down) or
	// a member joining: in-flight work is finished or handed over, so no
	// duplicate.
	FaultGraceful
	// FaultExternal is a fault of what hookd depends on (the broker,
	// Postgres): no hookd process loses anything, so no duplicate.
	FaultExternal
)

func (k FaultKind) String() string {
	switch k {
	case FaultCrash:
		return "crash"
	case FaultGraceful:
		return "graceful"
	default:
		return "external"
	}
}

// Fault is one fault injected in a scenario.
type Fault struct {
	What string
	Kind FaultKind
	// At is when it took effect: for a crash of a dispatcher, the moment
	// it was frozen (SIGSTOP) before the SIGKILL, so that what it held at
	// At is what it held when it died.
	At time.Time
	// Ports are the local ports of the faulted process's TCP sockets at At
	// (LocalPorts); empty for a process that sends no request.
	Ports map[int]bool
	// Conns are the connections it held to the receivers at At, resolved
	// from Ports by ResolveConns.
	Conns map[uint64]bool
	// Restarted is when the faulted process was started again (zero if
	// not): a connection the receiver accepted after it is its
	// successor's, even from the same port (`hookd run` sends again
	// within a second of a kill, on recycled ports).
	Restarted time.Time
	// AttemptEnds are the read_committed end offsets of the attempts topic
	// at At: an attempt record below them was there for a resuming
	// dispatcher to read. Nil if not read (then no answered request counts
	// as in flight).
	AttemptEnds map[int32]int64
	// BrokerInside: the faulted process hosts the broker (`hookd run`), so
	// AttemptEnds cannot be read while it is frozen; ResolveEnds takes
	// them after the run from the records' timestamps.
	BrokerInside bool
	// Rebalances: the fault changes the dispatchers' group (a dispatcher
	// dies, stops or joins; the broker goes away and the members' sessions
	// with it), so rebalances follow it for up to Aftermath.
	Rebalances bool
}

// Aftermath is how long the rebalances a fault sets off may go on: a dead
// member's 10 s session timeout, the restarted member's join, and the
// rebalances they cause.
const Aftermath = 20 * time.Second

// connGrace is how much later than a fault a receiver may accept a
// connection the faulted process opened before it.
const connGrace = time.Second

// ResolveConns fills each fault's Conns from its Ports: r's connections
// from those ports, the last accepted at most connGrace after the fault.
// Call it once the run is over, so that late accepts are known.
func ResolveConns(faults []Fault, r *Receiver) {
	for i := range faults {
		if len(faults[i].Ports) == 0 {
			continue
		}
		until := faults[i].At.Add(connGrace)
		if re := faults[i].Restarted; !re.IsZero() && re.Before(until) {
			until = re
		}
		faults[i].Conns = r.ConnsFrom(faults[i].Ports, until)
	}
}

// ResolveEnds fills the AttemptEnds of each fault with BrokerInside from
// attempts (read after the run): per partition, just past the last record
// produced at or before the fault. The broker died with the process, so
// these are the records that survived it, as the restarted dispatcher
// read them back; what the restarted process produced is timestamped after
// its start.
func ResolveEnds(faults []Fault, attempts []AttemptSeen) {
	for i := range faults {
		if !faults[i].BrokerInside || faults[i].AttemptEnds != nil {
			continue
		}
		ends := map[int32]int64{}
		for _, a := range attempts {
			if !a.Time.After(faults[i].At) {
				ends[a.Partition] = max(ends[a.Partition], a.Offset+1)
			}
		}
		faults[i].AttemptEnds = ends
	}
}

// FaultLog collects a scenario's faults, from any goroutine.
type FaultLog struct {
	mu     sync.Mutex
	faults []Fault
}

// Add records f.
func (l *FaultLog) Add(f Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

// Faults returns the faults recorded so far, in time order.
func (l *FaultLog) Faults() []Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]Fault(nil), l.faults...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out
}

// FaultDuplicates is what one fault cost.
type FaultDuplicates struct {
	Fault Fault
	// Open: requests on the process's connections not answered at At.
	// Unlogged: requests answered on them before At whose attempt record
	// was not on the attempts topic at At. InFlight is their sum.
	Open, Unlogged, InFlight int
	// Duplicates attributed to this fault, and how many it may cause:
	// InFlight for a crash, 0 otherwise.
	Duplicates, Allowed int
	// Sample names a few of the duplicates: endpoint/webhook-id, when the
	// first 2xx request and the duplicate started.
	Sample []string
}

// DuplicateReport attributes every duplicate of a run to a fault.
type DuplicateReport struct {
	Faults []FaultDuplicates
	// Unattributed are duplicates with no fault between the first 2xx
	// request and the duplicate, nor a rebalancing one within Aftermath
	// before it: none is allowed.
	Unattributed int
	// Total is every duplicate (2xx answers beyond the first of a pair).
	Total    int
	Problems []string
}

// OK reports whether no fault caused more duplicates than it may.
func (r *DuplicateReport) OK() bool { return len(r.Problems) == 0 }

// AttributeDuplicates counts the requests in flight at each fault and
// attributes each duplicate (a 2xx answer for an (endpoint, webhook-id)
// already answered 2xx) to a fault (see blame). faults must be in time
// order.
func AttributeDuplicates(reqs []Request, faults []Fault, attempts []AttemptSeen) *DuplicateReport {
	rep := &DuplicateReport{Faults: make([]FaultDuplicates, len(faults))}
	inFlight := make([]map[pair]time.Time, len(faults))
	for i, f := range faults {
		fd := &rep.Faults[i]
		fd.Fault = f
		inFlight[i] = countInFlight(fd, reqs, attempts)
		if f.Kind == FaultCrash {
			fd.Allowed = fd.InFlight
		}
	}
	byPair := map[pair][]Request{}
	for _, q := range reqs {
		if q.Status >= 200 && q.Status < 300 {
			p := pair{q.EndpointID, q.WebhookID}
			byPair[p] = append(byPair[p], q)
		}
	}
	for p, qs := range byPair {
		sort.Slice(qs, func(i, j int) bool { return qs[i].At.Before(qs[j].At) })
		for _, dup := range qs[1:] {
			rep.Total++
			if i := blame(p, qs[0].At, dup.At, faults, inFlight); i >= 0 {
				fd := &rep.Faults[i]
				fd.Duplicates++
				if len(fd.Sample) < 3 {
					fd.Sample = append(fd.Sample, fmt.Sprintf("%s/%s at %s and %s", p.ep, p.id,
						qs[0].At.Format("15:04:05.000"), dup.At.Format("15:04:05.000")))
				}
			} else {
				rep.Unattributed++
			}
		}
	}
	rep.problems()
	return rep
}

// blame returns the index of the fault a duplicate of p, whose request
// started at dup, is attributed to, the first 2xx request of p having
// started at first; -1 if none. In order: the last fault before dup at
// which a request of p made before dup was in flight (its request may
// have reached the receiver's handler only after the fault; the
// duplicate itself in flight at a fault is that fault's to re-send, not
// its cause); the first fault between first and dup;
// the last fault before first that set off rebalances, if first is within
// its Aftermath (the duplicate then comes from a partition moved by one of
// them).
func blame(p pair, first, dup time.Time, faults []Fault, inFlight []map[pair]time.Time) int {
	firstAfter, rebalancing, inFlightAt := -1, -1, -1
	for i, f := range faults {
		if f.At.After(dup) {
			break // faults are in time order
		}
		if since, ok := inFlight[i][p]; ok && since.Before(dup) {
			inFlightAt = i
		}
		switch {
		case f.At.Before(first):
			if f.Rebalances && first.Sub(f.At) <= Aftermath {
				rebalancing = i
			}
		case firstAfter < 0:
			firstAfter = i
		}
	}
	switch {
	case inFlightAt >= 0:
		return inFlightAt
	case firstAfter >= 0:
		return firstAfter
	}
	return rebalancing
}

// countInFlight fills fd's Open, Unlogged and InFlight and returns the
// pairs in flight, each with the start of its earliest request in flight. A request on the faulted process's connections is open
// when the receiver finished it at or after the fault (a frozen process
// sends nothing new, so a request the receiver read after the freeze was
// on the wire before it). One answered before is unlogged when its pair
// had more requests answered before the fault than attempt records that
// made a request below the fault's attempt offsets.
func countInFlight(fd *FaultDuplicates, reqs []Request, attempts []AttemptSeen) map[pair]time.Time {
	f := fd.Fault
	pairs := map[pair]time.Time{}
	mark := func(q Request) {
		p := pair{q.EndpointID, q.WebhookID}
		if since, ok := pairs[p]; !ok || q.At.Before(since) {
			pairs[p] = q.At
		}
	}
	if len(f.Conns) == 0 {
		return pairs
	}
	answeredBefore := map[pair]int{} // every sender's
	var mine []Request
	for _, q := range reqs {
		if q.Done.Before(f.At) {
			answeredBefore[pair{q.EndpointID, q.WebhookID}]++
		}
		if !f.Conns[q.Conn] {
			continue
		}
		if !q.Done.Before(f.At) {
			fd.Open++
			mark(q)
			continue
		}
		mine = append(mine, q)
	}
	if f.AttemptEnds != nil {
		logged := map[pair]int{}
		for _, a := range attempts {
			if end, ok := f.AttemptEnds[a.Partition]; ok && a.Offset < end && a.Requested {
				logged[pair{a.EndpointID, a.EventID}]++
			}
		}
		missing := map[pair]int{}
		for _, q := range mine {
			p := pair{q.EndpointID, q.WebhookID}
			if _, seen := missing[p]; !seen {
				missing[p] = max(answeredBefore[p]-logged[p], 0)
			}
			if missing[p] > 0 {
				missing[p]--
				fd.Unlogged++
				mark(q)
			}
		}
	}
	fd.InFlight = fd.Open + fd.Unlogged
	return pairs
}

func (r *DuplicateReport) problems() {
	for i, fd := range r.Faults {
		if fd.Duplicates <= fd.Allowed {
			continue
		}
		f := fd.Fault
		if f.Kind == FaultCrash {
			r.Problems = append(r.Problems, fmt.Sprintf("fault %d (%s at %s): %d duplicates, more than the %d requests in flight (%d open, %d answered without an attempt record); e.g. %s",
				i+1, f.What, f.At.Format("15:04:05.000"), fd.Duplicates, fd.InFlight, fd.Open, fd.Unlogged, strings.Join(fd.Sample, "; ")))
			continue
		}
		r.Problems = append(r.Problems, fmt.Sprintf("fault %d (%s at %s): %d duplicates; a %s fault may cause none (%d requests of the process in flight); e.g. %s",
			i+1, f.What, f.At.Format("15:04:05.000"), fd.Duplicates, f.Kind, fd.InFlight, strings.Join(fd.Sample, "; ")))
	}
	if r.Unattributed > 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("%d duplicates with no fault between the first 2xx request and the duplicate, nor a dispatcher or broker fault up to %s before it", r.Unattributed, Aftermath))
	}
}

// String renders the report as a Markdown table.
func (r *DuplicateReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| # | fault | kind | at | connections to the receivers | in flight (open + answered unlogged) | duplicates | allowed |\n|---|---|---|---|---|---|---|---|\n")
	for i, fd := range r.Faults {
		mark := ""
		if fd.Duplicates > fd.Allowed {
			mark = " **over**"
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %s | %d | %d (%d + %d) | %d%s | %d |\n", i+1, fd.Fault.What, fd.Fault.Kind,
			fd.Fault.At.Format("15:04:05.000"), len(fd.Fault.Conns), fd.InFlight, fd.Open, fd.Unlogged, fd.Duplicates, mark, fd.Allowed)
	}
	fmt.Fprintf(&b, "| - | no fault before the duplicate | | | | | %d | 0 |\n", r.Unattributed)
	fmt.Fprintf(&b, "duplicates in all: %d\n", r.Total)
	if len(r.Problems) > 0 {
		fmt.Fprintf(&b, "DUPLICATE BOUND EXCEEDED:\n- %s\n", strings.Join(r.Problems, "\n- "))
	}
	return b.String()
}
