package chaos_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/bench/chaos"
)

// The scenarios of issue 33: duplicates counted per fault. Every scenario
// (run) attributes each duplicate to a fault and fails when a crash caused
// more duplicates than the requests in flight at it, or any other fault
// caused one; these three make the faults that matter most for it.

// TestChaosBacklogKill kill -9's the only dispatcher twice while it holds a
// large backlog: a burst of 2,500 events (about 43,000 deliveries) to 20
// endpoints of one account that answer in 30 ms, killed once a quarter and
// once half of the deliveries have arrived.
func TestChaosBacklogKill(t *testing.T) {
	long(t)
	const total = 2500
	run(t, scenario{
		groups:      []chaos.EndpointGroup{{Class: "slow_30ms", Accounts: 1, PerAccount: 20, Behave: chaos.BehaveOK, Latency: 30 * time.Millisecond}},
		rate:        1000,
		duration:    3 * time.Minute, // the faults' window; the burst is over in seconds
		dispatchers: 1,
		settle:      4 * time.Minute,
		load:        func(c *chaos.LoadConfig) { c.Total = total },
		faults: func(ctx context.Context, h *harness) error {
			deliveries := total * 20 * 7 / 8 // a quarter of the outbox half rolled back
			for _, at := range []int{deliveries / 4, deliveries / 2} {
				if err := waitDelivered(ctx, h, at); err != nil {
					return err
				}
				if err := h.restart9(chaos.DispatcherName(0)); err != nil {
					return err
				}
			}
			return nil
		},
	})
}

// waitDelivered polls until n (endpoint, id) pairs were answered 2xx.
func waitDelivered(ctx context.Context, h *harness, n int) error {
	for h.top.Receiver.OKCount() < n {
		if err := h.hold(50 * time.Millisecond); err != nil { // polling interval
			return err
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d deliveries arrived before the load window ended", h.top.Receiver.OKCount(), n)
		}
	}
	return nil
}

// TestChaosScaleDispatchers scales the dispatchers from 1 to 3 and back to
// 1 under load: two join 10 s apart, then leave (SIGTERM) 10 s apart. No
// join or leave may cause a duplicate.
func TestChaosScaleDispatchers(t *testing.T) {
	long(t)
	steps := []func(h *harness) error{
		func(h *harness) error { return h.join(chaos.DispatcherName(1)) },
		func(h *harness) error { return h.join(chaos.DispatcherName(2)) },
		func(h *harness) error { return h.stop(chaos.DispatcherName(2), 60*time.Second) },
		func(h *harness) error { return h.stop(chaos.DispatcherName(1), 60*time.Second) },
	}
	run(t, scenario{
		groups: healthy(), rate: 100, duration: 55 * time.Second, settle: 2 * time.Minute, dispatchers: 1,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 10*time.Second, func(i int) error {
				if i >= len(steps) {
					return nil
				}
				start := time.Now()
				err := steps[i](h)
				h.t.Logf("%s: scale step %d done in %s (err=%v)", time.Now().Format("15:04:05.000"), i+1, time.Since(start).Round(time.Millisecond), err)
				return err
			})
		},
	})
}

// TestChaosGracefulStop is a rolling restart under load: every 6 s one
// process is stopped with SIGTERM and started again, in turn each
// dispatcher, the router, the relay and the attempt-log writer. No
// graceful stop may cause a duplicate.
func TestChaosGracefulStop(t *testing.T) {
	long(t)
	order := []string{chaos.DispatcherName(0), chaos.RoleRouter, chaos.DispatcherName(1), chaos.RoleRelay,
		chaos.DispatcherName(2), chaos.RoleAttemptLog}
	run(t, scenario{
		groups: healthy(), rate: 100, duration: 75 * time.Second, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 6*time.Second, func(i int) error {
				if i >= 2*len(order) {
					return nil
				}
				name := order[i%len(order)]
				start := time.Now()
				if err := h.stop(name, 60*time.Second); err != nil {
					return fmt.Errorf("stopping %s: %w", name, err)
				}
				stopped := time.Since(start)
				if err := h.cluster.StartProcess(h.ctx, name); err != nil {
					return fmt.Errorf("starting %s again: %w", name, err)
				}
				h.t.Logf("%s: SIGTERM %s (stopped in %s), restarted and ready", time.Now().Format("15:04:05.000"),
					name, stopped.Round(time.Millisecond))
				return nil
			})
		},
	})
}

// TestChaosRunKill9 is issue 33's first goal, from the binaries: one
// `hookd run` (every role and the embedded broker, persisted in its data
// directory) with a burst of 2,100 committed outbox events to 20 endpoints
// of one account answering in 30 ms (42,000 deliveries), kill -9'd once
// about 30% have arrived and started again on the same data directory. The
// kill takes the broker down with the dispatcher, so the restarted
// dispatcher reads the attempts back from what the broker persisted.
// Nothing may be lost, the kill may cause no more duplicates than the
// requests in flight at it (the harness's count; see chaos.ResolveEnds), and
// never more than the dispatcher's --concurrency (256).
func TestChaosRunKill9(t *testing.T) {
	long(t)
	const total, endpoints, concurrency = 2100, 20, 256
	var killedAt time.Time
	start := time.Now()
	run(t, scenario{
		groups: []chaos.EndpointGroup{{Class: "slow_30ms", Accounts: 1, PerAccount: endpoints, Behave: chaos.BehaveOK,
			Latency: 30 * time.Millisecond}},
		allInOne: true,
		rate:     1000,
		duration: 3 * time.Minute, // the fault's window; the burst is over in seconds
		settle:   4 * time.Minute,
		load: func(c *chaos.LoadConfig) {
			c.Total, c.OutboxShare, c.RollbackEvery, c.InvalidEvery = total, 1, 0, 0
		},
		faults: func(ctx context.Context, h *harness) error {
			if err := waitDelivered(ctx, h, total*endpoints*3/10); err != nil {
				return err
			}
			killedAt = time.Now()
			return h.restart9(chaos.RoleRun)
		},
		after: func(t *testing.T, rep *chaos.Report, dups *chaos.DuplicateReport) {
			require.Len(t, dups.Faults, 1)
			fd := dups.Faults[0]
			t.Logf("hookd run kill -9: expected %d, delivered %d, lost %d, duplicates %d, in flight at the kill %d (%d open + %d answered unlogged) on %d connections; requests %d, attempt rows that made a request %d, unknown rows %d; killed %s after the start, settled %s after the kill",
				rep.Expected, rep.Delivered, rep.Lost, dups.Total, fd.InFlight, fd.Open, fd.Unlogged, len(fd.Fault.Conns),
				rep.RequestsSent, rep.RequestRows, rep.UnknownRows, killedAt.Sub(start).Round(time.Second),
				time.Since(killedAt).Round(time.Second))
			require.Equal(t, total*endpoints, rep.Expected, "every event committed")
			require.LessOrEqual(t, dups.Total, concurrency, "duplicates beyond the dispatcher's concurrency")
		},
	})
}
