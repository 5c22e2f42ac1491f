package dispatcher

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/drain"
)

// commit commits the watermark of every partition (or of those only
// selects) that moved past its last commit.
func (d *Dispatcher) commit(ctx context.Context, only func(sched.Partition) bool) {
	d.commitMu.Lock()
	defer d.commitMu.Unlock()
	var wms []sched.Offset
	d.do(func() { wms = d.core.Watermarks(only) })
	if len(wms) == 0 {
		return
	}
	offsets := map[string]map[int32]kgo.EpochOffset{}
	for _, w := range wms {
		if offsets[w.Part.Topic] == nil {
			offsets[w.Part.Topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[w.Part.Topic][w.Part.Partition] = kgo.EpochOffset{Epoch: w.Epoch, Offset: w.Offset}
	}
	var done []sched.Offset
	var failed error
	d.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			failed = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					failed = err
					continue
				}
				done = append(done, sched.Offset{Part: sched.Partition{Topic: t.Topic, Partition: p.Partition},
					Offset: offsets[t.Topic][p.Partition].Offset})
			}
		}
	})
	d.do(func() {
		for _, o := range done {
			d.core.Committed(o)
		}
	})
	if failed != nil {
		d.m.commits.WithLabelValues("error").Inc()
		d.commitOutage.fail(ctx, d.log, failed)
		return
	}
	d.m.commits.WithLabelValues("ok").Inc()
	d.commitOutage.ok(ctx, d.log)
}

// background commits watermarks, runs the core's sweep, refreshes gauges
// and evicts idle breakers, every CommitInterval.
func (d *Dispatcher) background(stop <-chan struct{}) {
	tick := time.NewTicker(d.cfg.CommitInterval)
	defer tick.Stop()
	sweepEvery := max(d.cfg.Breaker.IdleEvict/10, time.Second)
	lastSweep := time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(d.workCtx, 10*time.Second)
		d.commit(ctx, nil)
		cancel()
		d.sweep()
		if time.Since(lastSweep) >= sweepEvery {
			lastSweep = time.Now()
			d.breakers.sweep()
			d.refusals.sweep(lastSweep)
		}
	}
}

// sweep runs the core's upkeep and refreshes the gauges it feeds.
func (d *Dispatcher) sweep() {
	waiting := map[string]int{}
	oldestDue := map[string]time.Duration{}
	for _, t := range d.names.Retry {
		waiting[t], oldestDue[t] = 0, 0
	}
	d.do(func() {
		now := d.clock.Now()
		d.apply(d.core.Sweep(now))
		d.m.activeAccounts.Set(float64(d.core.Active()))
		d.core.Partitions(now, func(st sched.PartitionStats) {
			p := strconv.Itoa(int(st.Part.Partition))
			d.m.held.WithLabelValues(st.Part.Topic, p).Set(float64(st.Held))
			d.m.lag.WithLabelValues(st.Part.Topic, p).Set(float64(st.Lag))
			if _, ok := d.tierOf[st.Part.Topic]; ok {
				waiting[st.Part.Topic] += st.Waiting
				oldestDue[st.Part.Topic] = max(oldestDue[st.Part.Topic], st.OldestDue)
			}
		})
	})
	for t, n := range waiting {
		d.m.tierWaiting.WithLabelValues(t).Set(float64(n))
	}
	for t, age := range oldestDue {
		d.m.tierOldestDue.WithLabelValues(t).Set(age.Seconds())
	}
}

// shutdown drops unstarted work, drains what is in flight and commits.
func (d *Dispatcher) shutdown(ctx context.Context) {
	d.do(func() { d.apply(d.core.Stop(d.clock.Now())) })
	done := make(chan struct{})
	go func() { d.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d.cfg.DrainTimeout):
		d.log.WarnContext(ctx, "dispatcher drain timed out; abandoning requests in flight, their records will be re-read",
			"drain_timeout", d.cfg.DrainTimeout)
		d.cancelWork()
		<-done
	}
	cctx, cancel := drain.Context(ctx, 10*time.Second)
	defer cancel()
	d.commit(cctx, nil)
}

// onAssigned creates the state of new partitions. kgo runs the revoke
// that may follow only after it returns, so it must not wait for the
// client: it needs only the loop, started before the client.
func (d *Dispatcher) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	parts := partitions(assigned)
	d.res.assign(parts) // read back before admitting their records
	d.do(func() { d.core.Assign(parts...) })
	d.log.Info("partitions assigned", "partitions", fmtTPs(assigned))
}

// onRevoked stops the revoked partitions, waits for their requests in
// flight, commits their watermarks and forgets them, all within
// RevokeTimeout.
func (d *Dispatcher) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	<-d.clientReady
	d.release(ctx, revoked, true)
}

// onLost forgets lost partitions without committing: another member owns
// them already.
func (d *Dispatcher) onLost(ctx context.Context, _ *kgo.Client, lost map[string][]int32) {
	<-d.clientReady
	d.release(ctx, lost, false)
}

// release stops the partitions of m. One deadline, RevokeTimeout from
// now, bounds all of it: the wait for the requests in flight ends at
// three quarters of it, the commit at the deadline. A request still in
// flight then is abandoned: its record is unfinished, so the partition's
// next owner attempts it again (a duplicate, never a skip).
func (d *Dispatcher) release(ctx context.Context, m map[string][]int32, commit bool) {
	parts := partitions(m)
	if len(parts) == 0 {
		return
	}
	var idle chan struct{}
	if !d.do(func() {
		d.apply(d.core.Revoke(d.clock.Now(), parts...))
		idle = d.waitIdle(parts)
	}) {
		return // the loop has ended: Run committed already
	}
	deadline := time.Now().Add(d.cfg.RevokeTimeout)
	wait := time.NewTimer(time.Until(deadline.Add(-d.cfg.RevokeTimeout / 4)))
	select {
	case <-idle:
	case <-ctx.Done():
	case <-wait.C:
		busy := 0
		d.do(func() {
			for _, p := range parts {
				if d.core.Busy(p) > 0 {
					busy++
				}
			}
		})
		d.log.WarnContext(ctx, "revoke timed out waiting for requests in flight; their records will be re-delivered",
			"revoke_timeout", d.cfg.RevokeTimeout, "partitions_busy", busy)
	}
	wait.Stop()
	if commit {
		cctx, cancel := context.WithDeadline(ctx, deadline)
		in := map[sched.Partition]bool{}
		for _, p := range parts {
			in[p] = true
		}
		d.commit(cctx, func(p sched.Partition) bool { return in[p] })
		cancel()
	}
	d.do(func() { d.core.Forget(parts...) })
	d.res.forget(parts)
	for _, tp := range parts {
		p := strconv.Itoa(int(tp.Partition))
		d.m.held.DeleteLabelValues(tp.Topic, p)
		d.m.lag.DeleteLabelValues(tp.Topic, p)
	}
	d.log.Info("partitions released", "partitions", fmtTPs(m), "committed", commit)
}

func partitions(m map[string][]int32) []sched.Partition {
	var out []sched.Partition
	for t, ps := range m {
		for _, p := range ps {
			out = append(out, sched.Partition{Topic: t, Partition: p})
		}
	}
	return out
}

func fmtTPs(m map[string][]int32) string {
	var ts []string
	for t := range m {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	s := ""
	for _, t := range ts {
		ps := append([]int32(nil), m[t]...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		s += fmt.Sprintf("%s%v ", t, ps)
	}
	return s
}
