package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookd/hookd/bench/chaos"
)

// The broker-fault scenarios (issue 16): the broker goes away for longer
// than any timeout of the roles, under load, and comes back. No hookd
// process may exit or be restarted (the harness restarts nothing but the
// broker), every role's /readyz answers 503 while the broker is away and
// 200 after, nothing is lost, and the fault causes no duplicate (issue 33:
// no hookd process loses what it finished, the producers are idempotent
// with their state persisted by the broker, and the consumers commit what
// they finished before their members expire or hand it over). The load
// runs the outbox and the ingress paths as two generators: ingress
// produces block while the broker is away (each gives up after 15 s, its
// events then uncertain), the outbox transactions go on and the relay's
// backlog builds in the WAL.

// waitLoad waits d of load before the fault; false if the load ended.
func waitLoad(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// TestChaosBrokerDown120s kills the broker with SIGKILL under load, keeps
// it down for 120 s (longer than every role's drain, session and request
// timeout), then starts it again on its data directory.
func TestChaosBrokerDown120s(t *testing.T) {
	long(t)
	run(t, scenario{
		groups: healthy(), rate: 60, duration: 170 * time.Second, settle: 4 * time.Minute,
		split: true, rideOut: true,
		faults: func(ctx context.Context, h *harness) error {
			if !waitLoad(ctx, 15*time.Second) {
				return nil
			}
			from := time.Now()
			h.cluster.Kill9(chaos.RoleBroker)
			h.external("broker kill -9, down 120s", true)
			before := h.top.Receiver.Total()
			h.t.Logf("%s: broker killed (SIGKILL), down for 120s; %d requests so far", from.Format("15:04:05.000"), before)
			if err := h.hold(120 * time.Second); err != nil { // the outage being injected
				return err
			}
			during := h.top.Receiver.Total() - before
			if err := h.cluster.StartProcess(h.ctx, chaos.RoleBroker); err != nil {
				return err
			}
			to := time.Now()
			h.fault("broker down 120s", from, to)
			h.t.Logf("%s: broker restarted; %d requests reached the receivers while it was down", to.Format("15:04:05.000"), during)
			return nil
		},
	})
}

// TestChaosBrokerFrozen60s freezes the broker with SIGSTOP for 60 s under
// load (a partition: its connections stay open and the kernel still
// accepts new ones, but nothing answers), then resumes it with SIGCONT.
func TestChaosBrokerFrozen60s(t *testing.T) {
	long(t)
	run(t, scenario{
		groups: healthy(), rate: 60, duration: 105 * time.Second, settle: 4 * time.Minute,
		split: true, rideOut: true,
		faults: func(ctx context.Context, h *harness) error {
			if !waitLoad(ctx, 15*time.Second) {
				return nil
			}
			from := time.Now()
			if err := h.cluster.Freeze(chaos.RoleBroker); err != nil {
				return err
			}
			h.external("broker frozen 60s", true)
			h.t.Logf("%s: broker frozen (SIGSTOP) for 60s", from.Format("15:04:05.000"))
			held := h.hold(60 * time.Second) // the partition being injected
			if err := h.cluster.Thaw(chaos.RoleBroker); err != nil {
				return err
			}
			to := time.Now()
			h.fault("broker frozen 60s", from, to)
			h.t.Logf("%s: broker resumed (SIGCONT)", to.Format("15:04:05.000"))
			return held
		},
	})
}
