package sched

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// prop drives a core with random inputs in a random order and checks its
// invariants after every one.
type prop struct {
	t   *testing.T
	rng *rand.Rand
	c   *Core
	cfg Config
	now time.Time
	eps map[string]Endpoint

	logs      map[Partition][]Record
	next      map[Partition]int64 // next offset to admit
	owned     map[Partition]bool  // assigned and not revoked
	revoked   map[Partition]bool  // revoked, not yet forgotten
	committed map[Partition]int64
	paused    map[Partition]bool
	// done: offsets finished in the current ownership of the partition;
	// ever: in any.
	done, ever map[Partition]map[int64]bool

	running   []*Item // requests in flight
	finishing []*Item // requests ended or skipped, to finish
	handedOut map[*Item]bool
	flights   map[string]int // by endpoint
	acctFly   map[string]int
	// fifoOut are the FIFO endpoint's (ep4) records out: started and not
	// yet released, retried or finished; fifoLast its last start's
	// offset per partition in the current ownership.
	fifoOut  map[*Item]bool
	fifoLast map[Partition]int64
}

func newProp(t *testing.T, seed uint64) *prop {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	cfg := Config{Concurrency: 1 + rng.IntN(12), MaxInFlight: 1 + rng.IntN(3), MaxEndpointInFlight: 3,
		PartitionMaxHeld: 1 + rng.IntN(30), EndpointBacklog: 1 + rng.IntN(10),
		AccountLinger: time.Duration(rng.IntN(3)) * time.Second, HoldAfter: time.Second}
	cfg.MaxEndpointInFlight = max(cfg.MaxEndpointInFlight, cfg.MaxInFlight)
	p := &prop{t: t, rng: rng, cfg: cfg, now: time.Unix(1e9, 0), eps: map[string]Endpoint{},
		logs: map[Partition][]Record{}, next: map[Partition]int64{}, owned: map[Partition]bool{},
		revoked: map[Partition]bool{}, committed: map[Partition]int64{}, paused: map[Partition]bool{},
		done: map[Partition]map[int64]bool{}, ever: map[Partition]map[int64]bool{},
		handedOut: map[*Item]bool{}, flights: map[string]int{}, acctFly: map[string]int{},
		fifoOut: map[*Item]bool{}, fifoLast: map[Partition]int64{}}
	for i := range 6 {
		e := Endpoint{ID: fmt.Sprintf("ep%d", i), Account: fmt.Sprintf("a%d", i%3), MaxInFlight: rng.IntN(4)}
		if i == 5 {
			e.RatePerSec = 2
		}
		e.FIFO = i == 4
		p.eps[e.ID] = e
	}
	p.c = New(cfg, func(id string) (Endpoint, bool) { e, ok := p.eps[id]; return e, ok }, nil)
	for i := range 3 {
		part := Partition{Topic: "t", Partition: int32(i)}
		for off := range 40 + rng.IntN(40) {
			r := Record{Part: part, Offset: int64(off), EndpointID: fmt.Sprintf("ep%d", rng.IntN(7))} // ep6: deleted
			r.Account = p.eps[r.EndpointID].Account
			switch rng.IntN(20) {
			case 0:
				r.Malformed = true
			case 1:
				r.Account = "intruder"
			case 2, 3:
				r.DueAt = p.now.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
			case 4:
				r.Answered = true // read back: a previous owner's attempt record
			}
			p.logs[part] = append(p.logs[part], r)
		}
		p.assign(part)
	}
	return p
}

func (p *prop) assign(part Partition) {
	p.c.Assign(part)
	p.owned[part] = true
	p.next[part] = max(p.committed[part], 0)
	p.done[part] = map[int64]bool{}
	p.paused[part] = false
	p.fifoLast[part] = -1
}

// step applies one random input.
func (p *prop) step() {
	switch k := p.rng.IntN(100); {
	case k < 25:
		p.admit()
	case k < 45 && len(p.running) > 0:
		i := p.rng.IntN(len(p.running))
		it := p.running[i]
		p.running[i] = p.running[len(p.running)-1]
		p.running = p.running[:len(p.running)-1]
		p.flights[it.EndpointID]--
		p.acctFly[it.Account]--
		p.finishing = append(p.finishing, it)
		p.apply(p.c.RequestDone(p.now, it, p.rng.IntN(4) > 0))
		if it.FIFO() && p.rng.IntN(3) == 0 { // delivered: released before its attempt record
			delete(p.fifoOut, it)
			p.apply(p.c.Release(p.now, it))
		}
	case k < 65 && len(p.finishing) > 0:
		p.finish(p.rng.IntN(len(p.finishing)))
	case k < 75:
		p.now = p.now.Add(time.Duration(p.rng.IntN(700)) * time.Millisecond)
		p.apply(p.c.Tick(p.now))
	case k < 80:
		p.apply(p.c.Sweep(p.now))
	case k < 88:
		p.commit()
	case k < 91:
		p.revoke(Partition{Topic: "t", Partition: int32(p.rng.IntN(3))})
	case k < 96:
		p.forgetOrReassign()
	default:
		e := p.eps["ep5"] // an endpoint update
		e.RatePerSec = float64(p.rng.IntN(4))
		p.eps["ep5"] = e
	}
	p.check()
}

func (p *prop) admit() {
	var recs []Record
	for part, log := range p.logs {
		if !p.owned[part] || (p.paused[part] && p.rng.IntN(4) > 0) {
			continue // a paused partition is fetched no more, bar records already buffered
		}
		n := min(int64(p.rng.IntN(8)), int64(len(log))-p.next[part])
		recs = append(recs, log[p.next[part]:p.next[part]+n]...)
		p.next[part] += n
	}
	p.apply(p.c.Admit(p.now, recs))
	for _, r := range recs {
		if r.Answered && p.owned[r.Part] { // finished by admission
			if p.ever[r.Part] == nil {
				p.ever[r.Part] = map[int64]bool{}
			}
			p.ever[r.Part][r.Offset], p.done[r.Part][r.Offset] = true, true
		}
	}
}

func (p *prop) finish(i int) {
	it := p.finishing[i]
	p.finishing[i] = p.finishing[len(p.finishing)-1]
	p.finishing = p.finishing[:len(p.finishing)-1]
	if it.FIFO() && p.rng.IntN(4) == 0 { // failed: retried in place
		delete(p.fifoOut, it)
		delete(p.handedOut, it)
		p.apply(p.c.Retry(p.now, it, p.now.Add(time.Duration(p.rng.IntN(3000))*time.Millisecond)))
		return
	}
	delete(p.fifoOut, it)
	ok := p.rng.IntN(30) > 0 // a produce cut by shutdown abandons the record
	if ok && (p.owned[it.Part] || p.revoked[it.Part]) {
		if p.done[it.Part][it.Offset] {
			p.t.Fatalf("%s[%d] finished twice", it.Part, it.Offset)
		}
		p.done[it.Part][it.Offset] = true
		if p.ever[it.Part] == nil {
			p.ever[it.Part] = map[int64]bool{}
		}
		p.ever[it.Part][it.Offset] = true
	}
	p.apply(p.c.Finished(p.now, it, ok))
}

// commit checks that no watermark passes a record not finished.
func (p *prop) commit() {
	for _, off := range p.c.Watermarks(nil) {
		for o := p.committed[off.Part]; o < off.Offset; o++ {
			if o >= 0 && !p.ever[off.Part][o] {
				p.t.Fatalf("commit of %s at %d past unfinished %d", off.Part, off.Offset, o)
			}
		}
		p.committed[off.Part] = off.Offset
		p.c.Committed(off)
	}
}

func (p *prop) revoke(part Partition) {
	if !p.owned[part] {
		return
	}
	p.owned[part] = false
	p.revoked[part] = true
	p.apply(p.c.Revoke(p.now, part))
	if p.paused[part] {
		p.t.Fatalf("%s revoked and left paused", part)
	}
}

// forgetOrReassign commits and forgets a revoked partition once its
// running records are done, or assigns a forgotten one again.
func (p *prop) forgetOrReassign() {
	for part := range p.revoked {
		if p.c.Busy(part) > 0 {
			continue
		}
		for _, off := range p.c.Watermarks(func(x Partition) bool { return x == part }) {
			p.committed[part] = max(p.committed[part], off.Offset)
		}
		p.c.Forget(part)
		delete(p.revoked, part)
		return
	}
	for part := range p.logs {
		if !p.owned[part] && !p.revoked[part] {
			p.assign(part)
			return
		}
	}
}

func (p *prop) apply(cmds []Command) {
	share := p.c.Share()
	for _, cmd := range cmds {
		switch cmd.Kind {
		case Start, Skip:
			if p.handedOut[cmd.Item] {
				p.t.Fatalf("%s[%d] handed out twice", cmd.Item.Part, cmd.Item.Offset)
			}
			if cmd.Item.Answered {
				p.t.Fatalf("%s[%d] answered, handed out", cmd.Item.Part, cmd.Item.Offset)
			}
			p.handedOut[cmd.Item] = true
			if cmd.Kind == Skip {
				p.finishing = append(p.finishing, cmd.Item)
				continue
			}
			it := cmd.Item
			if it.DueAt.After(p.now) {
				p.t.Fatalf("started before its due time")
			}
			p.running = append(p.running, it)
			p.startFIFO(it)
			p.flights[it.EndpointID]++
			p.acctFly[it.Account]++
			if p.flights[it.EndpointID] > p.c.maxInFlight(p.eps[it.EndpointID]) {
				p.t.Fatalf("%s over its in-flight limit", it.EndpointID)
			}
			if p.acctFly[it.Account] > share {
				p.t.Fatalf("account %s started its request %d with a share of %d", it.Account, p.acctFly[it.Account], share)
			}
		case Pause, Resume:
			if p.paused[cmd.Part] == (cmd.Kind == Pause) {
				p.t.Fatalf("%s: %v twice", cmd.Part, cmd.Kind)
			}
			p.paused[cmd.Part] = cmd.Kind == Pause
		}
	}
}

// startFIFO checks a start of the FIFO endpoint: no other of its records
// out, and none started after a later one of its partition.
func (p *prop) startFIFO(it *Item) {
	if it.EndpointID != "ep4" {
		return
	}
	if !it.FIFO() || len(p.fifoOut) > 0 {
		p.t.Fatalf("%s[%d] of the FIFO endpoint started with %d out (fifo %v)", it.Part, it.Offset, len(p.fifoOut), it.FIFO())
	}
	if it.Offset < p.fifoLast[it.Part] {
		p.t.Fatalf("%s[%d] of the FIFO endpoint started after %d", it.Part, it.Offset, p.fifoLast[it.Part])
	}
	p.fifoLast[it.Part] = it.Offset
	p.fifoOut[it] = true
}

// check verifies the invariants that hold between any two inputs.
func (p *prop) check() {
	if got := p.c.slots + len(p.running); got != p.cfg.Concurrency {
		p.t.Fatalf("slots leaked: %d free + %d running != %d", p.c.slots, len(p.running), p.cfg.Concurrency)
	}
	if p.c.slots > 0 && len(p.c.ready) > 0 {
		p.t.Fatalf("%d slots free and %d endpoints ready", p.c.slots, len(p.c.ready))
	}
	for _, a := range p.c.accts {
		if a.inFlight != p.acctFly[a.id] {
			p.t.Fatalf("account %s: %d in flight, %d running", a.id, a.inFlight, p.acctFly[a.id])
		}
	}
}

// drain lets every request end and every record finish, and checks that
// each record of an owned partition was finished once, and nothing is
// left in flight.
func (p *prop) drain() {
	for range 10_000 {
		for len(p.running) > 0 {
			it := p.running[0]
			p.running = p.running[1:]
			p.flights[it.EndpointID]--
			p.acctFly[it.Account]--
			p.finishing = append(p.finishing, it)
			p.apply(p.c.RequestDone(p.now, it, true))
		}
		for len(p.finishing) > 0 {
			p.finish(len(p.finishing) - 1)
		}
		p.now = p.now.Add(time.Second)
		p.apply(p.c.Tick(p.now))
		p.apply(p.c.Sweep(p.now))
		for part, log := range p.logs {
			if p.owned[part] && p.next[part] == int64(len(log)) && p.c.Busy(part) == 0 && p.c.parts[part].held.len() > 0 {
				p.revoke(part) // abandoned records: the next owner reads them again
			}
			if p.revoked[part] || !p.owned[part] {
				p.forgetOrReassign()
			}
		}
		p.admit()
		p.check()
		if p.settled() {
			break
		}
	}
	p.commit()
	for part, log := range p.logs {
		if !p.settled() || p.committed[part] != int64(len(log)) {
			p.t.Fatalf("%s: committed %d of %d: %v", part, p.committed[part], len(log), p.c.Watermarks(nil))
		}
	}
	if p.c.slots != p.cfg.Concurrency || len(p.c.eps) != 0 {
		p.t.Fatalf("left: %d slots of %d, %d endpoint states", p.c.slots, p.cfg.Concurrency, len(p.c.eps))
	}
}

// settled: every partition owned, read to its end and finished.
func (p *prop) settled() bool {
	for part, log := range p.logs {
		if !p.owned[part] || p.next[part] != int64(len(log)) || len(p.running)+len(p.finishing) > 0 {
			return false
		}
		if p.c.parts[part].held.len() > 0 {
			return false
		}
	}
	return true
}

// TestCoreProperties drives the core with random interleavings of every
// input (records read, requests ending, records finishing or abandoned,
// time passing, sweeps, commits, revokes and reassignments, endpoint
// updates, a FIFO endpoint's records released or retried in place) and
// checks after each: the FIFO endpoint has one record out at a time,
// started in offset order per partition; no record handed out twice or finished
// twice in one ownership, no commit past an unfinished record, no slot
// leaked, no endpoint over its limit, no account starting a request over
// its share, no free slot left while an endpoint is ready. At the end,
// every record is finished and committed and no state is left.
func TestCoreProperties(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			p := newProp(t, seed)
			for range 400 {
				p.step()
			}
			p.drain()
		})
	}
}
