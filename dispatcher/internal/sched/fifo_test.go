package sched

import (
	"testing"
	"testing/synctest"
	"time"
)

// fifoSchedule is the retry schedule of the FIFO tests: the delay before
// attempt n+1 is fifoSchedule[n-1]; after the last, the record is
// dead-lettered.
var fifoSchedule = []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// fifoStart is one start of a FIFO endpoint's request.
type fifoStart struct {
	off int64
	at  time.Time
}

// TestFIFOOrderKeptWithFailures: a FIFO endpoint's 300 records, some of
// whose first attempts fail and some of which fail every attempt, are
// started one at a time in offset order: every attempt of a record before
// any of the next, each retry exactly its schedule's delay after the
// failed answer, a record failing every attempt finished (dead-lettered)
// before the next starts. Another account's endpoint on the same
// partition and on another is not held up by the FIFO endpoint's waits.
func TestFIFOOrderKeptWithFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.EndpointBacklog, cfg.PartitionMaxHeld = 5, 4000 // FIFO records are never deferred
		s := newSim(t, cfg)
		// Every record is there from the start: fetching once a second
		// instead of every 10ms spares the simulation ~500,000 idle
		// wake-ups over its hours of retry delays.
		s.fetchEvery = time.Second
		s.endpoint("ep_fifo", "a", func(e *Endpoint) { e.FIFO, e.MaxInFlight = true, 16 })
		s.endpoint("ep_other", "b")
		p1 := Partition{Topic: "deliveries", Partition: 1}
		for range 300 {
			s.produce(p0, "ep_fifo", 1)
			s.produce(p0, "ep_other", 1)
			s.produce(p1, "ep_other", 1)
		}
		var starts []fifoStart
		attempts := map[int64]int{}
		s.onStart = func(it *Item) {
			if it.EndpointID == "ep_fifo" {
				starts = append(starts, fifoStart{it.Offset, time.Now()})
			}
		}
		s.retry = func(it *Item) (time.Time, bool) {
			attempts[it.Offset]++
			n := attempts[it.Offset]
			failing := it.Offset%14 == 0 && n == 1 || it.Offset%50 == 0 // first attempt, or every one
			if !failing || n > len(fifoSchedule) {
				return time.Time{}, false // delivered, or dead-lettered
			}
			return time.Now().Add(fifoSchedule[n-1]), true
		}
		start := time.Now()
		others := func() bool { return len(s.finished[p1]) == 300 }
		s.run(time.Minute, others)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("the other endpoint's records took %s behind the FIFO endpoint's retries", took)
		}
		s.run(24*time.Hour, s.finishedAll)
		if len(s.skips) != 0 || s.maxEp["ep_fifo"] != 1 {
			t.Fatalf("skips %v, %d in flight at most", s.skips, s.maxEp["ep_fifo"])
		}
		checkFIFOStarts(t, starts, attempts)
		t.Logf("%d starts of 300 FIFO records in %s (simulated)", len(starts), time.Since(start))
		s.stop()
	})
}

// checkFIFOStarts checks that starts are in offset order, each record's
// attempts together, each retry its schedule's delay (plus the 5ms
// request) after the attempt before.
func checkFIFOStarts(t *testing.T, starts []fifoStart, attempts map[int64]int) {
	t.Helper()
	n := 0
	for i, st := range starts {
		if i == 0 || st.off != starts[i-1].off {
			if i > 0 && st.off < starts[i-1].off {
				t.Fatalf("offset %d started after %d", st.off, starts[i-1].off)
			}
			if n > 0 && n != attempts[starts[i-1].off] {
				t.Fatalf("offset %d started %d times, answered %d", starts[i-1].off, n, attempts[starts[i-1].off])
			}
			n = 1
			continue
		}
		want := 5*time.Millisecond + fifoSchedule[n-1]
		if got := st.at.Sub(starts[i-1].at); got != want {
			t.Fatalf("offset %d attempt %d started %s after the one before, want %s", st.off, n+1, got, want)
		}
		n++
	}
	if len(attempts) != 300 {
		t.Fatalf("%d FIFO records answered, want 300", len(attempts))
	}
}

// fifoCore is a core with a FIFO endpoint ep_fifo and another, ep_b.
func fifoCore(cfg Config) *Core {
	eps := map[string]Endpoint{
		"ep_fifo": {ID: "ep_fifo", Account: "a", FIFO: true, MaxInFlight: 8},
		"ep_b":    {ID: "ep_b", Account: "b"},
	}
	c := New(cfg, func(id string) (Endpoint, bool) { e, ok := eps[id]; return e, ok }, nil)
	c.Assign(p0)
	return c
}

func recs(p Partition, from int64, eps ...string) []Record {
	out := make([]Record, len(eps))
	for i, ep := range eps {
		out[i] = Record{Part: p, Offset: from + int64(i), EndpointID: ep, Account: map[string]string{"ep_fifo": "a", "ep_b": "b"}[ep]}
	}
	return out
}

// started returns the items of cmds' Start commands.
func started(cmds []Command) []*Item {
	var its []*Item
	for _, c := range cmds {
		if c.Kind == Start {
			its = append(its, c.Item)
		}
	}
	return its
}

// TestFIFODeadLetterBeforeNext: a FIFO endpoint's next record starts only
// once the record before is finished, not when its request ended: its
// dead letter (or retry decision) is produced first. Release, for a
// delivered record whose attempt record is still being produced, lets it
// start earlier.
func TestFIFODeadLetterBeforeNext(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := fifoCore(defaultConfig())
	its := started(c.Admit(now, recs(p0, 0, "ep_fifo", "ep_fifo", "ep_fifo", "ep_b")))
	if len(its) != 2 || its[0].Offset != 0 || its[1].EndpointID != "ep_b" || !its[0].FIFO() || its[1].FIFO() {
		t.Fatalf("started %v, want offset 0 (FIFO) and ep_b's record", its)
	}
	if got := started(c.RequestDone(now, its[0], true)); len(got) != 0 {
		t.Fatalf("offset %d started before offset 0 was finished (its dead letter produced)", got[0].Offset)
	}
	got := started(c.Finished(now, its[0], true))
	if len(got) != 1 || got[0].Offset != 1 {
		t.Fatalf("after offset 0 finished, started %v, want offset 1", got)
	}
	c.RequestDone(now, got[0], true)
	if next := started(c.Release(now, got[0])); len(next) != 1 || next[0].Offset != 2 {
		t.Fatalf("after offset 1 was released, started %v, want offset 2", next)
	}
	if cmds := c.Finished(now, got[0], true); len(started(cmds)) != 0 {
		t.Fatalf("a released record's finish started %v", cmds)
	}
}

// TestFIFORetryInPlace: a failed FIFO record comes back through Retry:
// it is not running meanwhile (a revoke does not wait for it), the
// watermark stays on it, and at its due time it starts again before the
// endpoint's later records. A revoke drops it unfinished.
func TestFIFORetryInPlace(t *testing.T) {
	now := time.Unix(1e9, 0)
	c := fifoCore(defaultConfig())
	its := started(c.Admit(now, recs(p0, 0, "ep_fifo", "ep_fifo")))
	c.RequestDone(now, its[0], true)
	if cmds := c.Retry(now, its[0], now.Add(30*time.Second)); len(started(cmds)) != 0 {
		t.Fatalf("started %v while offset 0 waits to be retried", cmds)
	}
	if at, ok := c.NextWake(); !ok || !at.Equal(now.Add(30*time.Second)) {
		t.Fatalf("next wake %v %v, want the retry's due time", at, ok)
	}
	if c.Busy(p0) != 0 {
		t.Fatalf("busy %d while the record waits to be retried", c.Busy(p0))
	}
	if got := started(c.Tick(now.Add(29 * time.Second))); len(got) != 0 {
		t.Fatalf("started %v before the retry's due time", got)
	}
	again := started(c.Tick(now.Add(30 * time.Second)))
	if len(again) != 1 || again[0] != its[0] {
		t.Fatalf("at its due time started %v, want offset 0 again", again)
	}
	c.RequestDone(now, again[0], true)
	c.Retry(now, again[0], now.Add(time.Hour))
	c.Revoke(now, p0)
	if _, ok := c.NextWake(); ok || c.Busy(p0) != 0 {
		t.Fatal("a revoked partition's retry is still armed")
	}
	if w := c.Watermarks(nil); len(w) != 1 || w[0].Offset != 0 {
		t.Fatalf("watermarks %v, want offset 0, unfinished", w)
	}
	if len(c.eps) != 0 {
		t.Fatalf("endpoint states left: %d", len(c.eps))
	}
}

// TestFIFOHeldBound: a slow FIFO endpoint whose head waits to be retried
// holds its later records in the partition, never deferring them (a
// FIFO endpoint's backlog is not deferred, its partition not shed): the partition
// pauses at PartitionMaxHeld, and resumes under half once the head is
// finished and they drain.
func TestFIFOHeldBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.PartitionMaxHeld, cfg.EndpointBacklog = 20, 3
		s := newSim(t, cfg)
		s.endpoint("ep_fifo", "a", func(e *Endpoint) { e.FIFO = true })
		s.latency = func(string) time.Duration { return 3 * time.Second } // over HoldAfter: it holds its slot
		s.produce(p0, "ep_fifo", 100)
		tries := 0
		s.retry = func(it *Item) (time.Time, bool) {
			if it.Offset == 0 && tries < len(fifoSchedule) {
				tries++
				return time.Now().Add(fifoSchedule[tries-1]), true
			}
			return time.Time{}, false
		}
		s.run(time.Minute, func() bool { return s.pausedNow[p0] })
		s.runFor(time.Minute)
		if held := s.c.parts[p0].held.len(); held < cfg.PartitionMaxHeld || len(s.skips) != 0 || len(s.finished[p0]) != 0 {
			t.Fatalf("held %d, skips %v, finished %d: want the partition full, nothing deferred", held, s.skips, len(s.finished[p0]))
		}
		s.run(time.Hour, s.finishedAll)
		if s.pausedNow[p0] || s.pauses != 1 || len(s.skips) != 0 {
			t.Fatalf("paused %v after %d pauses, skips %v", s.pausedNow[p0], s.pauses, s.skips)
		}
		s.stop()
	})
}

// TestFIFOOtherEndpointsKeepTheirLimits: one FIFO endpoint does not change
// the in-flight limit of the others.
func TestFIFOOtherEndpointsKeepTheirLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, defaultConfig())
		s.endpoint("ep_fifo", "a", func(e *Endpoint) { e.FIFO = true })
		s.endpoint("ep_b", "a")
		for range 50 {
			s.produce(p0, "ep_fifo", 1)
			s.produce(p0, "ep_b", 1)
		}
		s.run(time.Minute, s.finishedAll)
		if s.maxEp["ep_fifo"] != 1 || s.maxEp["ep_b"] != 4 {
			t.Fatalf("peaks: FIFO %d (want 1), other %d (want 4)", s.maxEp["ep_fifo"], s.maxEp["ep_b"])
		}
		s.stop()
	})
}
