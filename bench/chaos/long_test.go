package chaos_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/bench/chaos"
	"github.com/hookd/hookd/internal/pgcluster"
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
					h.external("broker SIGTERM", true)
					if err := h.cluster.Stop(chaos.RoleBroker, 10*time.Second); err != nil {
						return err
					}
					h.t.Logf("%s: broker stopped (SIGTERM)", time.Now().Format("15:04:05.000"))
				case 1:
					h.external("broker kill -9", true)
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

// ownPostgres starts a Postgres cluster the scenario may stop and crash.
func ownPostgres(t *testing.T) *pgcluster.Postgres {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pgcluster.Start(ctx, pgcluster.Config{})
	require.NoError(t, err)
	t.Cleanup(pg.Close)
	return pg
}

// TestChaosPostgresRestart runs on a Postgres cluster of its own and stops
// it twice under load: a fast shutdown held down for 5 seconds, then an
// immediate one (a crash: recovery on start). Outbox transactions fail
// while it is down (counted as rolled back or uncertain); nothing committed
// may be lost.
func TestChaosPostgresRestart(t *testing.T) {
	long(t)
	pg := ownPostgres(t)
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
				h.cluster.NoteFault("postgres -m " + mode)
				h.external("postgres stopped -m "+mode+", 5s down", false)
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

// TestChaosPostgresOutage60s stops Postgres for a full minute under load
// (issue 5): deliveries of events arriving on the ingress topic go on during
// the outage (the router and the dispatchers do not need Postgres), the
// outbox waits, and once Postgres is back the attempt log catches up with no
// gap and no duplicate rows (the checker compares it with the receivers).
func TestChaosPostgresOutage60s(t *testing.T) {
	long(t)
	pg := ownPostgres(t)
	run(t, scenario{
		databaseURL: pg.URL(),
		groups:      healthy(), rate: 60, duration: 100 * time.Second, settle: 3 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			t := time.NewTimer(15 * time.Second) // load first
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if err := pg.Stop(h.ctx, "fast"); err != nil {
				return err
			}
			h.cluster.NoteFault("postgres stopped for 60s")
			h.external("postgres stopped -m fast, 60s down", false)
			before := h.top.Receiver.Total()
			h.t.Logf("%s: postgres stopped (-m fast) for 60s; %d requests so far", time.Now().Format("15:04:05.000"), before)
			outage := time.NewTimer(60 * time.Second) // the outage being injected
			<-outage.C
			during := h.top.Receiver.Total() - before
			if err := pg.Start(h.ctx); err != nil {
				return err
			}
			h.t.Logf("%s: postgres started; %d requests reached the receivers during the outage", time.Now().Format("15:04:05.000"), during)
			if during == 0 {
				return fmt.Errorf("no delivery during the 60s Postgres outage")
			}
			return nil
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
// for a minute: a fourth and a fifth dispatcher join and leave (SIGTERM,
// in the background, its duration recorded) in turn, and one of the three
// first dies (SIGKILL) and comes back, so the group rebalances constantly.
func TestChaosRebalanceStorm(t *testing.T) {
	long(t)
	var mu sync.Mutex
	var stops []time.Duration
	var wg sync.WaitGroup
	leave := func(h *harness, name string) {
		wg.Go(func() {
			start := time.Now()
			err := h.stop(name, 90*time.Second)
			mu.Lock()
			stops = append(stops, time.Since(start))
			mu.Unlock()
			h.t.Logf("%s: %s left after %s (SIGTERM; err=%v)", time.Now().Format("15:04:05.000"), name, time.Since(start).Round(time.Millisecond), err)
		})
	}
	join := func(h *harness, name string) error {
		if p := h.cluster.Proc(name); p != nil && !p.Exited() {
			return nil // still leaving
		}
		h.t.Logf("%s: %s joins", time.Now().Format("15:04:05.000"), name)
		return h.join(name)
	}
	run(t, scenario{
		groups: healthy(), rate: 100, duration: 60 * time.Second, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			defer wg.Wait()
			return every(ctx, 3*time.Second, func(i int) error {
				switch i % 5 {
				case 0:
					return join(h, chaos.DispatcherName(3))
				case 1:
					leave(h, chaos.DispatcherName(3))
				case 2:
					return h.restart9(chaos.DispatcherName(i / 5 % 3))
				case 3:
					return join(h, chaos.DispatcherName(4))
				default:
					leave(h, chaos.DispatcherName(4))
				}
				return nil
			})
		},
	})
	mu.Lock()
	defer mu.Unlock()
	slowest := time.Duration(0)
	for _, d := range stops {
		slowest = max(slowest, d)
	}
	t.Logf("%d graceful leaves, slowest %s", len(stops), slowest)
}

// TestChaosGroupMemberKills is the smallest repro of the stall the kill
// loop found on the embedded broker: kill -9 the router (a one-member
// consumer group) three times, 10 seconds apart, under load, then expect
// every delivery within the settle time. See docs/reliability.md.
func TestChaosGroupMemberKills(t *testing.T) {
	long(t)
	run(t, scenario{
		groups: healthy(), rate: 50, duration: 40 * time.Second, settle: 2 * time.Minute,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 10*time.Second, func(i int) error {
				if i >= 3 {
					return nil
				}
				return h.restart9(chaos.RoleRouter)
			})
		},
	})
}
