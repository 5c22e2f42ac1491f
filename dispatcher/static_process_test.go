package dispatcher_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
)

// TestStaticMemberRestart: two `hookd dispatch` processes, the second
// killed with kill -9 and started again at once. With --instance-id the
// restart takes the dead process's place and partitions, and the other
// dispatcher never revokes its own: it goes on delivering. Without (the dynamic
// subtest, the check that this test can fail), the restart joins as a new
// member and the other revokes everything until the dead member's session
// expires. A graceful stop of a static member leaves the group: the other
// takes its partitions without waiting for the session timeout.
func TestStaticMemberRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; builds the hookd binary")
	}
	t.Parallel()
	bin := proctest.Binary(t, "hookd")
	db := pgtest.New(t)
	for _, static := range []bool{true, false} {
		name := map[bool]string{true: "static", false: "dynamic"}[static]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testStaticMemberRestart(t, bin, db.URL, static)
		})
	}
}

func testStaticMemberRestart(t *testing.T, bin, dbURL string, static bool) {
	env := []string{"HOOKD_LOG_LEVEL=info"}
	kafka := startBroker(t, bin, env)
	dispatch := func(id string) *proctest.Proc {
		listen := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
		args := []string{"dispatch", "--database-url", dbURL, "--brokers", kafka, "--partitions", "4",
			"--retry-schedule", "1s", "--replication-factor", "1", "--min-insync-replicas", "1",
			"--listen", listen}
		if static {
			args = append(args, "--instance-id", id)
		}
		p := proctest.Start(t, bin, env, args...)
		p.WaitReady(listen, 60*time.Second)
		return p
	}
	// assigned: p's last rebalance line is an assignment of n partitions
	// of the deliveries topic.
	assigned := func(p *proctest.Proc, n int) func() bool {
		return func() bool {
			out := p.Stderr()
			i := strings.LastIndex(out, `msg="partitions `)
			return i >= 0 && strings.HasPrefix(out[i:], `msg="partitions assigned"`) && deliveriesAssigned(out[i:]) == n
		}
	}
	a := dispatch("dispatch-a")
	k9Eventually(t, 30*time.Second, "dispatch-a assigned every partition", assigned(a, 4), a)
	b := dispatch("dispatch-b")
	k9Eventually(t, 30*time.Second, "dispatch-b assigned half", assigned(b, 2), b)
	k9Eventually(t, 30*time.Second, "dispatch-a left with half", assigned(a, 2), a)

	// dispatch-a, the first to join, leads the group; dispatch-b is
	// killed. (A restarted leader makes one rebalance of live members:
	// kgo rejoins to check the group's subscriptions.)
	mark := len(a.Stderr())
	b.Kill()
	b2 := dispatch("dispatch-b")
	k9Eventually(t, 30*time.Second, "the restarted dispatch-b assigned", assigned(b2, 2), b2)
	released := strings.Count(a.Stderr()[mark:], `msg="partitions released"`)
	if static {
		if released != 0 {
			t.Fatalf("dispatch-a revoked its partitions %d times while dispatch-b restarted:\n%s", released, a.Stderr()[mark:])
		}
	} else if released == 0 {
		t.Fatalf("a dynamic restart made dispatch-a revoke nothing:\n%s", a.Stderr()[mark:])
	}
	if !static {
		return
	}
	// A graceful stop leaves: dispatch-a takes every partition. Without
	// the leave it would too, after the session timeout; the log line says
	// which happened.
	b2.Signal(syscall.SIGTERM)
	k9Eventually(t, 30*time.Second, "dispatch-a assigned every partition", assigned(a, 4), a)
	if !strings.Contains(b2.Stderr(), `msg="left the group"`) {
		t.Fatalf("dispatch-b stopped without leaving the group:\n%s", b2.Stderr())
	}
}

// deliveriesAssigned counts the partitions of webhooks.deliveries in a
// "partitions assigned" log line (the line starting out).
func deliveriesAssigned(out string) int {
	line, _, _ := strings.Cut(out, "\n")
	_, rest, ok := strings.Cut(line, "webhooks.deliveries[")
	if !ok {
		return 0
	}
	list, _, _ := strings.Cut(rest, "]")
	return len(strings.Fields(list))
}

// startBroker runs `hookd broker` on a free port until the test ends and
// returns its address once it listens.
func startBroker(t *testing.T, bin string, env []string) string {
	kafka := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
	broker := proctest.Start(t, bin, env, "broker", "--data-dir", t.TempDir(), "--kafka-listen", kafka)
	broker.WaitListening(kafka, 60*time.Second)
	return kafka
}
