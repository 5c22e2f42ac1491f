package sched

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

var p0 = Partition{Topic: "deliveries", Partition: 0}

// stop releases the hanging requests and waits for every request, so the
// bubble ends with no goroutine left.
func (s *sim) stop() {
	s.releaseAll()
	for len(s.inFlight) > 0 {
		it := <-s.done
		delete(s.inFlight, it)
	}
}

// TestBurstToHealthyEndpointsIsNeverDeferred is issue 28's burst: 30,000
// records to 200 healthy accounts (one endpoint each, answering in 5ms)
// over 6 partitions, read as fast as fetching allows. Every account is
// busy at its share and the partitions fill up: fetching pauses
// (backpressure) and nothing is deferred to a retry tier. Before the fix
// (HoldAfter 0 behaves as it did), 18,205 records of accounts at their
// share were deferred (fair_share) once their partition was half full.
func TestBurstToHealthyEndpointsIsNeverDeferred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Every account busy at its share: ceil(800/200) = 4, each endpoint's
		// limit (as with a third of the endpoints in each of 3 dispatchers
		// of 256 slots).
		cfg := defaultConfig()
		cfg.Concurrency = 800
		s := newSim(t, cfg)
		for a := range 200 {
			s.endpoint(fmt.Sprintf("ep_%d", a), fmt.Sprintf("acct_%d", a))
		}
		for i := range 30_000 {
			ep := (i * 7919) % 200 // the router keeps an endpoint on one partition
			s.produce(Partition{Topic: "deliveries", Partition: int32(ep % 6)}, fmt.Sprintf("ep_%d", ep), 1)
		}
		start := time.Now()
		s.run(time.Minute, s.finishedAll)
		if len(s.skips) != 0 {
			t.Fatalf("deferred or skipped: %v", s.skips)
		}
		if s.pauses == 0 {
			t.Fatal("no partition paused: no backpressure was needed?")
		}
		t.Logf("30000 delivered in %s (simulated), %d pauses", time.Since(start), s.pauses)
		s.stop()
	})
}

// TestStuckEndpointBacklogIsDeferred: an endpoint whose one slot hangs
// holds it; its records past EndpointBacklog are deferred (backlog_full),
// once no answer came for HoldAfter, newest first; none before.
func TestStuckEndpointBacklogIsDeferred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.EndpointBacklog = 5
		s := newSim(t, cfg)
		s.endpoint("ep_busy", "a", func(e *Endpoint) { e.MaxInFlight = 1 })
		s.latency = func(string) time.Duration { return -1 }
		s.produce(p0, "ep_busy", 20)
		s.run(time.Second, func() bool { return len(s.inFlight) == 1 })
		s.runFor(cfg.HoldAfter / 2)
		if len(s.skips) != 0 {
			t.Fatalf("deferred before HoldAfter: %v", s.skips)
		}
		s.run(3*time.Second, func() bool { return s.skips[DeferBacklogFull] == 14 })
		if n := len(s.finished[p0]); n != 14 {
			t.Fatalf("%d finished, want the 14 deferred", n)
		}
		for off := int64(6); off < 20; off++ {
			if s.finished[p0][off] != 1 {
				t.Fatalf("offset %d not deferred: the newest are", off)
			}
		}
		s.stop()
	})
}

// TestFairShareBetweenAccounts: an account whose endpoint allows 100,000
// requests in flight and never answers, next to three healthy accounts,
// holds at most its share, ceil(32/4) = 8, while they are active; once
// they have been idle for AccountLinger it may use every slot.
func TestFairShareBetweenAccounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Concurrency, cfg.MaxEndpointInFlight = 32, 100_000
		s := newSim(t, cfg)
		s.endpoint("ep_evil", "evil", func(e *Endpoint) { e.MaxInFlight = 100_000 })
		for a := range 3 {
			for e := range 4 {
				s.endpoint(fmt.Sprintf("ep_%d_%d", a, e), fmt.Sprintf("h%d", a))
			}
		}
		s.latency = func(ep string) time.Duration {
			if ep == "ep_evil" {
				return -1
			}
			return 5 * time.Millisecond
		}
		for n := range 50 {
			for a := range 3 {
				for e := range 4 {
					s.produce(p0, fmt.Sprintf("ep_%d_%d", a, e), 1)
				}
			}
			_ = n
		}
		s.produce(p0, "ep_evil", 900)
		healthy := func() bool { return len(s.finished[p0]) == 600 }
		s.run(time.Minute, healthy)
		if s.maxAcct["evil"] != 8 {
			t.Fatalf("the abusive account peaked at %d in flight, want its share 8", s.maxAcct["evil"])
		}
		s.run(cfg.AccountLinger+3*time.Second, func() bool { return s.acctFlight["evil"] == 32 })
		if len(s.skips) != 0 {
			t.Fatalf("deferred: %v", s.skips)
		}
		s.stop()
	})
}

// TestEndpointAndProcessLimits: no endpoint ever has more requests in
// flight than its own limit capped by MaxEndpointInFlight, nor the
// process more than Concurrency; endpoints take turns.
func TestEndpointAndProcessLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Concurrency, cfg.MaxEndpointInFlight = 10, 6
		s := newSim(t, cfg)
		s.endpoint("ep_default", "a")
		s.endpoint("ep_own", "a", func(e *Endpoint) { e.MaxInFlight = 2 })
		s.endpoint("ep_greedy", "a", func(e *Endpoint) { e.MaxInFlight = 1000 })
		s.latency = func(string) time.Duration { return 20 * time.Millisecond }
		for range 100 {
			s.produce(p0, "ep_default", 1)
			s.produce(p0, "ep_own", 1)
			s.produce(p0, "ep_greedy", 1)
		}
		peak := 0
		s.onStart = func(*Item) { peak = max(peak, len(s.inFlight)) }
		s.run(time.Minute, s.finishedAll)
		want := map[string]int{"ep_default": 4, "ep_own": 2, "ep_greedy": 6}
		for ep, n := range want {
			if s.maxEp[ep] != n {
				t.Errorf("%s peaked at %d in flight, want %d", ep, s.maxEp[ep], n)
			}
		}
		if peak > cfg.Concurrency {
			t.Fatalf("%d in flight, Concurrency %d", peak, cfg.Concurrency)
		}
		s.stop()
	})
}

// TestRateLimitSpacing: an endpoint limited to 4/s starts its requests
// 250ms apart while an unlimited one on the same partition is not held
// up; a rate raised by an endpoint update applies within RateRecheck.
func TestRateLimitSpacing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, defaultConfig())
		s.endpoint("ep_limited", "a", func(e *Endpoint) { e.RatePerSec = 4 })
		s.endpoint("ep_free", "b")
		s.produce(p0, "ep_limited", 9)
		s.produce(p0, "ep_free", 100)
		s.run(time.Second, func() bool { return len(s.starts["ep_free"]) == 100 })
		if n := len(s.starts["ep_limited"]); n > 4 {
			t.Fatalf("%d limited starts within the first second", n)
		}
		s.run(time.Minute, func() bool { return len(s.starts["ep_limited"]) == 5 })
		e := s.eps["ep_limited"]
		e.RatePerSec = 1000
		s.eps["ep_limited"] = e
		raised := time.Now()
		s.run(time.Minute, func() bool { return len(s.starts["ep_limited"]) == 9 })
		st := s.starts["ep_limited"]
		for i := 1; i < 5; i++ {
			if gap := st[i].Sub(st[i-1]); gap < 250*time.Millisecond {
				t.Fatalf("starts %d and %d %s apart at 4/s", i-1, i, gap)
			}
		}
		if took := st[8].Sub(raised); took > RateRecheck+10*time.Millisecond {
			t.Fatalf("raised rate applied after %s", took)
		}
		s.stop()
	})
}

// TestStuckAccountIsShedFromAFullPartition: an account alone fills its
// partition with records for a hanging endpoint (it may: it is alone);
// when another account becomes active and the first has held its share
// for HoldAfter, its queued records are deferred (fair_share), newest
// first, until the partition resumes, and the other account's records
// behind them are read and delivered.
func TestStuckAccountIsShedFromAFullPartition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Concurrency, cfg.MaxEndpointInFlight, cfg.PartitionMaxHeld = 32, 16, 200
		s := newSim(t, cfg)
		s.pollRecords = 50
		s.endpoint("ep_evil", "evil", func(e *Endpoint) { e.MaxInFlight = 100_000 })
		s.endpoint("ep_h", "h")
		s.latency = func(ep string) time.Duration {
			if ep == "ep_evil" {
				return -1
			}
			return 5 * time.Millisecond
		}
		s.produce(p0, "ep_evil", 400)
		s.run(time.Minute, func() bool { return s.pausedNow[p0] && s.acctFlight["evil"] == 16 })
		p1 := Partition{Topic: "deliveries", Partition: 1}
		s.produce(p1, "ep_h", 1)
		s.produce(p0, "ep_h", 1)
		s.run(time.Minute, func() bool { return s.finished[p0][400] == 1 && s.finished[p1][0] == 1 })
		if s.skips[DeferFairShare] == 0 {
			t.Fatal("nothing shed")
		}
		s.stop()
	})
}

// TestRetryTierDueTimes: a record due in the future holds its partition
// (paused) until its due time, with the records read after it behind it;
// nothing starts before its due time; the core's next wake is the due
// time.
func TestRetryTierDueTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, defaultConfig())
		s.endpoint("ep", "a")
		tier := Partition{Topic: "retry-30s", Partition: 0}
		t0 := time.Now()
		dues := []time.Duration{30 * time.Second, 29 * time.Second, 31 * time.Second, 0}
		for _, d := range dues {
			s.produce(tier, "ep", 1, func(r *Record) {
				if d > 0 {
					r.DueAt = t0.Add(d)
				}
			})
		}
		s.run(time.Second, func() bool { return s.pausedNow[tier] })
		if at, ok := s.c.NextWake(); !ok || !at.Equal(t0.Add(30*time.Second)) {
			t.Fatalf("next wake %s %v, want the head's due time", at.Sub(t0), ok)
		}
		s.run(time.Minute, s.finishedAll) // started() fails any start before its due time
		st := s.starts["ep"]
		if len(st) != 4 || st[0].Sub(t0) != 30*time.Second || st[1].Sub(t0) != 30*time.Second || st[2].Sub(t0) != 31*time.Second {
			t.Fatalf("starts %v: the head at 30s with the earlier one behind it, then 31s", st)
		}
		if s.pausedNow[tier] {
			t.Fatal("still paused")
		}
		s.stop()
	})
}

// TestWatermarkAcrossRevoke: records finish out of order; the watermark
// is the first unfinished one. A revoke drops the queued records
// (unfinished: the next owner reads them again), while the running ones
// still finish and move the watermark up to the first dropped one, never
// past it.
func TestWatermarkAcrossRevoke(t *testing.T) {
	cfg := defaultConfig()
	cfg.Concurrency = 3
	now := time.Unix(1e9, 0)
	c := New(cfg, func(id string) (Endpoint, bool) { return Endpoint{ID: id, Account: "a"}, true }, nil)
	c.Assign(p0)
	recs := make([]Record, 8)
	for i := range recs {
		recs[i] = Record{Part: p0, Offset: int64(10 + i), EndpointID: fmt.Sprintf("ep%d", i), Account: "a"}
	}
	var started []*Item
	for _, cmd := range c.Admit(now, recs) {
		started = append(started, cmd.Item)
	}
	if len(started) != 3 {
		t.Fatalf("%d started, want Concurrency 3", len(started))
	}
	wm := func() int64 {
		t.Helper()
		w := c.Watermarks(nil)
		if len(w) != 1 {
			t.Fatalf("watermarks %v", w)
		}
		return w[0].Offset
	}
	c.Revoke(now, p0)
	if n := c.Busy(p0); n != 3 {
		t.Fatalf("busy %d, want the 3 running", n)
	}
	for _, it := range []*Item{started[2], started[0], started[1]} {
		if cmds := c.RequestDone(now, it, true); len(cmds) != 0 {
			t.Fatalf("a revoked partition's queued record started: %v", cmds)
		}
		c.Finished(now, it, true)
		if it == started[2] && wm() != 10 {
			t.Fatalf("watermark %d past the unfinished 10", wm())
		}
	}
	if c.Busy(p0) != 0 || wm() != 13 {
		t.Fatalf("busy %d, watermark %d, want 0 and the first dropped record 13", c.Busy(p0), wm())
	}
	c.Committed(Offset{Part: p0, Offset: 13})
	if w := c.Watermarks(nil); len(w) != 0 {
		t.Fatalf("committed, yet %v", w)
	}
	c.Forget(p0)
	c.Assign(p0)
	if cmds := c.Admit(now, recs[3:]); len(cmds) != 3 || cmds[0].Item.Offset != 13 {
		t.Fatalf("re-read from the watermark: %v", cmds)
	}
}

// TestPartitionMaxHeldOfOne: a partition that may hold one record pauses
// at every record and resumes once it is finished (half of 1 is 0 in
// integers: it was never resumed).
func TestPartitionMaxHeldOfOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.PartitionMaxHeld = 1
		s := newSim(t, cfg)
		s.pollRecords = 1
		s.endpoint("ep", "a")
		s.produce(p0, "ep", 5)
		s.run(time.Minute, s.finishedAll)
		if s.pauses != 5 || s.pausedNow[p0] {
			t.Fatalf("%d pauses, paused now %v", s.pauses, s.pausedNow[p0])
		}
		s.stop()
	})
}

// TestStuckAccountKeepsPartitionFlowing: records of an account whose
// requests hang, interleaved with healthy accounts' records, would fill
// their partition and pause it, holding up the healthy records behind
// them; once the account holds its share for HoldAfter they are deferred
// (fair_share) instead, and every healthy record is delivered.
func TestStuckAccountKeepsPartitionFlowing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.Concurrency, cfg.PartitionMaxHeld = 32, 200
		s := newSim(t, cfg)
		s.pollRecords, s.sweepEvery = 20, 100*time.Millisecond
		s.endpoint("ep_evil", "evil", func(e *Endpoint) { e.MaxInFlight = 100_000 })
		for a := range 3 {
			s.endpoint(fmt.Sprintf("ep_%d", a), fmt.Sprintf("h%d", a))
		}
		s.latency = func(ep string) time.Duration {
			if ep == "ep_evil" {
				return -1
			}
			return 200 * time.Millisecond // slow enough to finish while the partition is paused full
		}
		healthy := 0
		for range 100 {
			for a := range 3 {
				s.produce(p0, fmt.Sprintf("ep_%d", a), 1)
			}
			s.produce(p0, "ep_evil", 5)
		}
		s.onStart = func(it *Item) {
			if it.Account != "evil" {
				healthy++
			}
		}
		s.run(time.Minute, func() bool { return healthy == 300 })
		if s.maxAcct["evil"] > 8 {
			t.Fatalf("evil peaked at %d, over its share 8", s.maxAcct["evil"])
		}
		if s.skips[DeferFairShare] == 0 {
			t.Fatal("nothing deferred")
		}
		t.Logf("%s", s)
		s.stop()
	})
}

// TestAnsweredRecordsFinishWithoutARequest: records admitted Answered (a
// previous owner's attempt records were read back) finish on admission,
// with no command, also behind a tier head not due yet; the watermark
// passes them only once the records before them finished; the others are
// sent as usual.
func TestAnsweredRecordsFinishWithoutARequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, defaultConfig())
		s.endpoint("ep", "a")
		s.onStart = func(it *Item) {
			if it.Answered {
				t.Fatalf("%s[%d] answered, started", it.Part, it.Offset)
			}
		}
		answered := func(r *Record) { r.Answered = true }
		for i := range 10 {
			if i%2 == 1 {
				s.produce(p0, "ep", 1, answered)
			} else {
				s.produce(p0, "ep", 1)
			}
		}
		tier := Partition{Topic: "retry-30s", Partition: 0}
		t0 := time.Now()
		due := func(d time.Duration) func(*Record) { return func(r *Record) { r.DueAt = t0.Add(d) } }
		s.produce(tier, "ep", 1, due(30*time.Second))
		s.produce(tier, "ep", 3, due(29*time.Second), answered)
		s.produce(tier, "ep", 1, due(31*time.Second))
		wm := func(p Partition) int64 {
			for _, w := range s.c.Watermarks(func(q Partition) bool { return q == p }) {
				return w.Offset
			}
			return -1
		}
		s.run(time.Second, func() bool { return wm(p0) == 10 })
		if n := len(s.starts["ep"]); n != 5 {
			t.Fatalf("%d requests, want the 5 unanswered records of %s", n, p0)
		}
		if w := wm(tier); w != 0 {
			t.Fatalf("tier watermark %d, want 0: the head is not due", w)
		}
		s.run(time.Minute, func() bool { return wm(tier) == 5 })
		if n := len(s.starts["ep"]); n != 7 {
			t.Fatalf("%d requests, want 7", n)
		}
		if len(s.skips) != 0 {
			t.Fatalf("skip commands for answered records: %v", s.skips)
		}
		s.stop()
	})
}

// TestSentCountsAsProgress: an endpoint at its in-flight limit holds its
// slots (its backlog is deferred) only HoldAfter after its last answer or
// send: a request waiting for its intent's acknowledgement before it goes
// on the wire is not the endpoint's delay.
func TestSentCountsAsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := defaultConfig()
		cfg.EndpointBacklog, cfg.MaxInFlight = 2, 1
		deferred := func(sent bool) (early, late int) {
			c := New(cfg, func(id string) (Endpoint, bool) { return Endpoint{ID: id, Account: "a"}, true }, nil)
			c.Assign(p0)
			t0 := time.Now()
			recs := make([]Record, 6)
			for i := range recs {
				recs[i] = Record{Part: p0, Offset: int64(i), EndpointID: "ep", Account: "a"}
			}
			cmds := c.Admit(t0, recs)
			if len(cmds) != 1 || cmds[0].Kind != Start {
				t.Fatalf("commands %v, want one start", cmds)
			}
			if sent {
				c.Sent(t0.Add(900*time.Millisecond), cmds[0].Item)
			}
			early = len(c.Sweep(t0.Add(1500 * time.Millisecond)))
			late = len(c.Sweep(t0.Add(2 * time.Second)))
			return early, late
		}
		if early, _ := deferred(false); early != 3 {
			t.Fatalf("without a send, %d deferred at 1.5s, want the 3 past the backlog", early)
		}
		if early, late := deferred(true); early != 0 || late != 3 {
			t.Fatalf("sent at 0.9s: %d deferred at 1.5s, %d at 2s; want 0 then 3", early, late)
		}
	})
}
