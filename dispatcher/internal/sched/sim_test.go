package sched

import (
	"fmt"
	"testing"
	"time"
)

// sim drives a Core the way the dispatcher's loop does, inside a
// testing/synctest bubble (time.Now and timers are the bubble's fake
// clock): one goroutine owns the core; a goroutine per request sleeps
// the receiver's latency and reports its end; fetches read the unpaused
// partitions every fetchEvery; Tick runs at NextWake and Sweep every
// sweepEvery. Produces are acknowledged at once.
type sim struct {
	t    *testing.T
	c    *Core
	cfg  Config
	eps  map[string]Endpoint
	logs map[Partition][]Record // what each partition holds, by offset
	next map[Partition]int64    // next offset to fetch

	// latency of a request to an endpoint; negative: it hangs until
	// release is closed.
	latency func(ep string) time.Duration
	release chan struct{}
	done    chan *Item

	inFlight   map[*Item]bool
	epInFlight map[string]int
	acctFlight map[string]int
	maxEp      map[string]int
	maxAcct    map[string]int
	starts     map[string][]time.Time // by endpoint
	skips      map[string]int         // by reason
	finished   map[Partition]map[int64]int
	pausedNow  map[Partition]bool
	pauses     int
	onStart    func(it *Item)
	// retry, when set, is asked about every FIFO record whose request
	// ended: ok, it is retried in place at at (Retry) instead of finished.
	retry       func(it *Item) (at time.Time, ok bool)
	fetchEvery  time.Duration
	sweepEvery  time.Duration
	pollRecords int
}

func newSim(t *testing.T, cfg Config) *sim {
	s := &sim{
		t: t, cfg: cfg,
		eps:  map[string]Endpoint{},
		logs: map[Partition][]Record{}, next: map[Partition]int64{},
		latency:  func(string) time.Duration { return 5 * time.Millisecond },
		release:  make(chan struct{}),
		done:     make(chan *Item, 1024),
		inFlight: map[*Item]bool{}, epInFlight: map[string]int{}, acctFlight: map[string]int{},
		maxEp: map[string]int{}, maxAcct: map[string]int{}, starts: map[string][]time.Time{},
		skips: map[string]int{}, finished: map[Partition]map[int64]int{}, pausedNow: map[Partition]bool{},
		fetchEvery: 10 * time.Millisecond, sweepEvery: time.Second, pollRecords: 1000,
	}
	s.c = New(cfg, func(id string) (Endpoint, bool) { e, ok := s.eps[id]; return e, ok }, nil)
	t.Cleanup(s.releaseAll) // a failed test leaves no request hanging in the bubble
	return s
}

func defaultConfig() Config {
	return Config{Concurrency: 256, MaxInFlight: 4, MaxEndpointInFlight: 64, PartitionMaxHeld: 2000,
		EndpointBacklog: 1000, AccountLinger: 10 * time.Second, HoldAfter: time.Second}
}

// endpoint adds an endpoint of account acct.
func (s *sim) endpoint(id, acct string, mod ...func(*Endpoint)) {
	e := Endpoint{ID: id, Account: acct}
	for _, m := range mod {
		m(&e)
	}
	s.eps[id] = e
}

// produce appends records for endpoint ep (of its account) to p.
func (s *sim) produce(p Partition, ep string, n int, mod ...func(*Record)) {
	for range n {
		r := Record{Part: p, Offset: int64(len(s.logs[p])), EndpointID: ep, Account: s.eps[ep].Account}
		for _, m := range mod {
			m(&r)
		}
		s.logs[p] = append(s.logs[p], r)
	}
	if _, ok := s.next[p]; !ok {
		s.next[p] = 0
		s.c.Assign(p)
	}
}

// apply carries out the core's commands.
func (s *sim) apply(cmds []Command) {
	for _, cmd := range cmds {
		switch cmd.Kind {
		case Start:
			s.started(cmd.Item)
		case Skip:
			s.skips[cmd.Reason]++
			s.finish(cmd.Item)
		case Pause:
			if s.pausedNow[cmd.Part] {
				s.t.Fatalf("%s paused twice", cmd.Part)
			}
			s.pausedNow[cmd.Part] = true
			s.pauses++
		case Resume:
			if !s.pausedNow[cmd.Part] {
				s.t.Fatalf("%s resumed while not paused", cmd.Part)
			}
			s.pausedNow[cmd.Part] = false
		}
	}
}

func (s *sim) started(it *Item) {
	now := time.Now()
	if !it.DueAt.IsZero() && now.Before(it.DueAt) {
		s.t.Fatalf("%s[%d] started at %s before its due time %s", it.Part, it.Offset, now, it.DueAt)
	}
	s.inFlight[it] = true
	s.epInFlight[it.EndpointID]++
	s.acctFlight[it.Account]++
	s.maxEp[it.EndpointID] = max(s.maxEp[it.EndpointID], s.epInFlight[it.EndpointID])
	s.maxAcct[it.Account] = max(s.maxAcct[it.Account], s.acctFlight[it.Account])
	s.starts[it.EndpointID] = append(s.starts[it.EndpointID], now)
	if s.onStart != nil {
		s.onStart(it)
	}
	lat := s.latency(it.EndpointID)
	go func() {
		if lat < 0 {
			<-s.release
		} else {
			time.Sleep(lat)
		}
		s.done <- it
	}()
}

func (s *sim) finish(it *Item) {
	m := s.finished[it.Part]
	if m == nil {
		m = map[int64]int{}
		s.finished[it.Part] = m
	}
	m[it.Offset]++
	if m[it.Offset] > 1 {
		s.t.Fatalf("%s[%d] finished twice", it.Part, it.Offset)
	}
	s.apply(s.c.Finished(time.Now(), it, true))
}

// fetch admits up to pollRecords records of every unpaused partition.
func (s *sim) fetch() {
	var recs []Record
	for p, log := range s.logs {
		if s.pausedNow[p] {
			continue
		}
		from := s.next[p]
		to := min(int64(len(log)), from+int64(s.pollRecords))
		recs = append(recs, log[from:to]...)
		s.next[p] = to
	}
	if len(recs) > 0 {
		s.apply(s.c.Admit(time.Now(), recs))
	}
}

// run drives the core until cond holds, failing after limit.
func (s *sim) run(limit time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(limit)
	fetch := time.NewTicker(s.fetchEvery)
	defer fetch.Stop()
	sweep := time.NewTicker(s.sweepEvery)
	defer sweep.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("not done after %s: %s", limit, s)
		}
		var wake <-chan time.Time
		var tm *time.Timer
		if at, ok := s.c.NextWake(); ok {
			tm = time.NewTimer(time.Until(at))
			wake = tm.C
		}
		select {
		case it := <-s.done:
			s.epInFlight[it.EndpointID]--
			s.acctFlight[it.Account]--
			delete(s.inFlight, it)
			s.apply(s.c.RequestDone(time.Now(), it, true))
			if s.retry != nil && it.FIFO() {
				if at, ok := s.retry(it); ok {
					s.apply(s.c.Retry(time.Now(), it, at))
					break
				}
			}
			s.finish(it)
		case <-wake:
			s.apply(s.c.Tick(time.Now()))
		case <-fetch.C:
			s.fetch()
		case <-sweep.C:
			s.apply(s.c.Sweep(time.Now()))
		}
		if tm != nil {
			tm.Stop()
		}
	}
}

// releaseAll ends the hanging requests.
func (s *sim) releaseAll() {
	select {
	case <-s.release:
	default:
		close(s.release)
	}
}

// runFor drives the core for d.
func (s *sim) runFor(d time.Duration) {
	s.t.Helper()
	end := time.Now().Add(d)
	s.run(d+time.Hour, func() bool { return !time.Now().Before(end) })
}

// finishedAll reports whether every record produced was finished.
func (s *sim) finishedAll() bool {
	for p, log := range s.logs {
		if len(s.finished[p]) != len(log) {
			return false
		}
	}
	return true
}

func (s *sim) String() string {
	n := 0
	for _, m := range s.finished {
		n += len(m)
	}
	return fmt.Sprintf("finished %d, in flight %d, skips %v, active %d", n, len(s.inFlight), s.skips, s.c.active)
}
