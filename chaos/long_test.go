package chaos_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/chaos"
)

// The long scenarios run with `make chaos` (HOOKD_CHAOS=long). Each runs
// under load with the everyday endpoint mix unless it says otherwise and
// asserts the same invariants as TestChaosShortKill9.

// TestChaosLongKillLoop kill -9's every role in turn, every 5 seconds, for
// two minutes: the relay, the router, each of three dispatchers and the
// attempt-log writer, each restarted at once.
func TestChaosLongKillLoop(t *testing.T) {
	long(t)
	order := []string{chaos.RoleRelay, chaos.DispatcherName(0), chaos.RoleRouter, chaos.DispatcherName(1),
		chaos.RoleAttemptLog, chaos.DispatcherName(2)}
	run(t, scenario{
		groups: healthy(), rate: 100, duration: 2 * time.Minute, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 5*time.Second, func(i int) error { return h.restart9(order[i%len(order)]) })
		},
	})
}

// TestChaosBrokerRestart restarts the embedded broker (persisted in its
// data directory) twice under load: once with SIGTERM, once with kill -9.
// Every other process must ride it out without exiting.
func TestChaosBrokerRestart(t *testing.T) {
	long(t)
	run(t, scenario{
		groups: healthy(), rate: 80, duration: 70 * time.Second, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 20*time.Second, func(i int) error {
				switch i {
				case 0:
					if err := h.cluster.Stop(chaos.RoleBroker, 10*time.Second); err != nil {
						return err
					}
					h.t.Logf("%s: broker stopped (SIGTERM)", time.Now().Format("15:04:05.000"))
				case 1:
					h.cluster.Kill9(chaos.RoleBroker)
					h.t.Logf("%s: broker killed (SIGKILL)", time.Now().Format("15:04:05.000"))
				default:
					return nil
				}
				if err := h.cluster.StartProcess(h.ctx, chaos.RoleBroker); err != nil {
					return err
				}
				h.t.Logf("%s: broker restarted", time.Now().Format("15:04:05.000"))
				return nil
			})
		},
	})
}

// TestChaosPostgresRestart runs on a Postgres cluster of its own and stops
// it twice under load: a fast shutdown held down for 5 seconds, then an
// immediate one (a crash: recovery on start). Outbox transactions fail
// while it is down (counted as rolled back or uncertain); nothing committed
// may be lost.
func TestChaosPostgresRestart(t *testing.T) {
	long(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := chaos.StartPostgres(ctx)
	require.NoError(t, err)
	t.Cleanup(pg.Close)
	run(t, scenario{
		databaseURL: pg.URL(),
		groups:      healthy(), rate: 80, duration: 70 * time.Second, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 20*time.Second, func(i int) error {
				mode := map[int]string{0: "fast", 1: "immediate"}[i]
				if mode == "" {
					return nil
				}
				if err := pg.Stop(h.ctx, mode); err != nil {
					return err
				}
				h.t.Logf("%s: postgres stopped (-m %s)", time.Now().Format("15:04:05.000"), mode)
				t := time.NewTimer(5 * time.Second) // the outage being injected
				<-t.C
				if err := pg.Start(h.ctx); err != nil {
					return err
				}
				h.t.Logf("%s: postgres started", time.Now().Format("15:04:05.000"))
				return nil
			})
		},
	})
}

// TestChaosBadReceivers sends to receivers that misbehave on every request
// (hang, reset, 5xx storm, 429 with Retry-After, redirects to the metadata
// address and to loopback, 32 MiB and endless bodies, a byte-by-byte
// response) next to healthy ones, and kills a dispatcher midway. The
// misbehaving ones end delivered or dead-lettered with a reason, no redirect
// is followed, and the healthy endpoints get everything.
func TestChaosBadReceivers(t *testing.T) {
	long(t)
	always := -1
	rep := run(t, scenario{
		groups: []chaos.EndpointGroup{
			{Class: "ok", Accounts: 4, PerAccount: 2, Behave: chaos.BehaveOK, Weight: 3},
			{Class: "hang", Behave: chaos.BehaveHang, FailAttempts: always},
			{Class: "reset_once", Behave: chaos.BehaveReset, FailAttempts: 1},
			{Class: "reset", Behave: chaos.BehaveReset, FailAttempts: always},
			{Class: "slow_bytes", Behave: chaos.BehaveSlowBytes, FailAttempts: always},
			{Class: "5xx_storm", Behave: chaos.Behave5xx, FailAttempts: always},
			{Class: "429_retry_after", Behave: chaos.Behave429, FailAttempts: always},
			{Class: "redirect_metadata", Behave: chaos.BehaveRedirMeta, FailAttempts: always},
			{Class: "redirect_loopback", Behave: chaos.BehaveRedirLocal, FailAttempts: always},
			{Class: "huge_body", Behave: chaos.BehaveHugeBody, FailAttempts: always},
			{Class: "endless_body", Behave: chaos.BehaveEndless, FailAttempts: always},
		},
		rate: 60, duration: 60 * time.Second, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 30*time.Second, func(i int) error {
				if i > 0 {
					return nil
				}
				return h.restart9(chaos.DispatcherName(1))
			})
		},
	})
	require.Zero(t, rep.Classes["ok"].Dead, "healthy endpoints must get everything")
	require.Zero(t, rep.Classes["ok"].Lost)
}

// TestChaosRebalanceStorm makes dispatchers join and leave every 3 seconds
// (alternately a fourth and fifth joining, one leaving with SIGTERM, one
// dying with kill -9 and coming back) for a minute.
func TestChaosRebalanceStorm(t *testing.T) {
	long(t)
	var changes atomic.Int64
	run(t, scenario{
		groups: healthy(), rate: 100, duration: 60 * time.Second, settle: 2 * time.Minute,
		crashes: func() int { return int(changes.Load()) },
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 3*time.Second, func(i int) error {
				changes.Add(1)
				ts := time.Now().Format("15:04:05.000")
				switch i % 4 {
				case 0:
					h.t.Logf("%s: dispatch-3 joins", ts)
					return h.cluster.StartProcess(h.ctx, chaos.DispatcherName(3))
				case 1:
					h.t.Logf("%s: dispatch-3 leaves (SIGTERM)", ts)
					return h.cluster.Stop(chaos.DispatcherName(3), 30*time.Second)
				case 2:
					h.t.Logf("%s: dispatch-0 dies (SIGKILL) and comes back", ts)
					return h.restart9(chaos.DispatcherName(0))
				default:
					h.t.Logf("%s: dispatch-4 joins and dispatch-1 leaves", ts)
					if p := h.cluster.Proc(chaos.DispatcherName(4)); p == nil || p.Exited() {
						if err := h.cluster.StartProcess(h.ctx, chaos.DispatcherName(4)); err != nil {
							return err
						}
					}
					if err := h.cluster.Stop(chaos.DispatcherName(1), 30*time.Second); err != nil {
						return err
					}
					return h.cluster.StartProcess(h.ctx, chaos.DispatcherName(1))
				}
			})
		},
	})
}
