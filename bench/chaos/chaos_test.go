package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/bench/chaos"
	"github.com/hookd/hookd/internal/pgtest"
)

var (
	buildOnce sync.Once
	hookdBin  string
	buildErr  error
)

func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hookd-chaos-bin-")
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		hookdBin, buildErr = chaos.BuildHookd(ctx, dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return hookdBin
}

// long gates the long scenarios: `make chaos` sets HOOKD_CHAOS=long.
func long(t *testing.T) {
	t.Helper()
	if os.Getenv("HOOKD_CHAOS") != "long" {
		t.Skip("long chaos scenario: run with `make chaos` (HOOKD_CHAOS=long)")
	}
}

// scenario is one fault-injection run.
type scenario struct {
	groups      []chaos.EndpointGroup
	rate        float64       // events/s
	duration    time.Duration // of the load
	dispatchers int
	partitions  int
	settle      time.Duration // how long to wait for the last deliveries
	// faults runs while the load runs; its ctx ends with the load.
	faults func(ctx context.Context, h *harness) error
	// databaseURL, if set, is used instead of a pgtest database (a server
	// the scenario restarts).
	databaseURL string
	// load, if set, adjusts the load generator's configuration (a burst
	// instead of a steady rate).
	load func(*chaos.LoadConfig)
	// split runs the outbox and the ingress load as two generators, so
	// that ingress produces blocked by a broker outage do not hold up the
	// outbox transactions (the relay's backlog builds as it would).
	split bool
	// allInOne runs one `hookd run` (every role and the embedded broker)
	// instead of a process per role; dispatchers is then ignored.
	allInOne bool
	// rideOut asserts that the roles ride the faults out: no role process
	// exits or is started again, and the /readyz of each answers 503
	// within every fault window the faults record (harness.fault) and 200
	// after.
	rideOut bool
	// after, if set, checks more once every invariant held.
	after func(t *testing.T, rep *chaos.Report, dups *chaos.DuplicateReport)
}

// harness is what a running scenario offers its faults.
type harness struct {
	t       *testing.T
	cluster *chaos.Cluster
	top     *chaos.Topology
	ledger  *chaos.Ledger
	pool    *pgxpool.Pool
	adm     *kadm.Client
	// ctx outlives the load: a restart begun at the load's end completes.
	ctx context.Context
	// faults is every fault injected, for the duplicate bound: each fault
	// goes through a harness method that records it.
	faults chaos.FaultLog

	mu      sync.Mutex
	windows []window
}

// window is when a fault was in effect.
type window struct {
	what     string
	from, to time.Time
}

// fault records that what was in effect from from to to.
func (h *harness) fault(what string, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.windows = append(h.windows, window{what, from, to})
}

func (h *harness) faultWindows() []window {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]window(nil), h.windows...)
}

// hold waits d (the fault being injected) or until h's ctx ends.
func (h *harness) hold(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.ctx.Done():
		return h.ctx.Err()
	case <-t.C:
		return nil
	}
}

// restart9 kill -9's a process and starts it again. A dispatcher is
// frozen (SIGSTOP) first, and what it holds is read while it is frozen:
// its connections to the receivers and the attempts topic's ends, to count
// the requests it had in flight when it died.
func (h *harness) restart9(name string) error {
	if sendsRequests(name) {
		if err := h.cluster.Freeze(name); err != nil {
			return fmt.Errorf("freezing %s: %w", name, err)
		}
		// The fault's time is when every thread has stopped: what it sent
		// until then was sent before the fault.
		if err := chaos.WaitStopped(h.cluster.Proc(name).Pid(), 2*time.Second); err != nil {
			h.t.Errorf("freezing %s: %v", name, err)
		}
	}
	f := h.snapshot("kill -9 "+name, name, chaos.FaultCrash)
	h.cluster.Kill9(name)
	f.Restarted = time.Now()
	h.faults.Add(f)
	if err := h.cluster.StartProcess(h.ctx, name); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	h.t.Logf("%s: kill -9 %s, restarted and ready", time.Now().Format("15:04:05.000"), name)
	return nil
}

// stop stops a process with SIGTERM (SIGKILL after timeout): a graceful
// fault, which may cause no duplicate.
func (h *harness) stop(name string, timeout time.Duration) error {
	h.faults.Add(h.snapshot("SIGTERM "+name, name, chaos.FaultGraceful))
	return h.cluster.Stop(name, timeout)
}

// join starts a process that is not running (a member joining its group):
// a graceful fault.
func (h *harness) join(name string) error {
	h.faults.Add(chaos.Fault{What: "start " + name, Kind: chaos.FaultGraceful, At: time.Now(), Rebalances: isDispatcher(name)})
	return h.cluster.StartProcess(h.ctx, name)
}

// external records a fault of the broker or Postgres, injected by the
// caller at this moment; rebalances says whether the dispatchers' group
// loses its members' sessions (the broker going away does).
func (h *harness) external(what string, rebalances bool) {
	h.faults.Add(chaos.Fault{What: what, Kind: chaos.FaultExternal, At: time.Now(), Rebalances: rebalances})
}

func isDispatcher(name string) bool { return strings.HasPrefix(name, "dispatch-") }

// sendsRequests: the process dispatches (a dispatcher, or `hookd run`).
func sendsRequests(name string) bool { return isDispatcher(name) || name == chaos.RoleRun }

// snapshot returns a fault of the process name as of now; for a
// dispatcher, with the connections it holds to the receivers and the
// attempts topic's read_committed ends (see chaos.Fault). A failure to
// read them fails the test (the fault then allows no duplicate).
func (h *harness) snapshot(what, name string, kind chaos.FaultKind) chaos.Fault {
	f := chaos.Fault{What: what, Kind: kind, At: time.Now(), Rebalances: sendsRequests(name)}
	p := h.cluster.Proc(name)
	if !sendsRequests(name) || p == nil || p.Exited() {
		return f
	}
	ports, err := chaos.LocalPorts(p.Pid())
	if err != nil {
		h.t.Errorf("%s: reading the sockets of %s: %v", what, name, err)
		return f
	}
	f.Ports = ports
	if name == chaos.RoleRun {
		// Its broker is frozen with it: the ends are taken after the run
		// (chaos.ResolveEnds).
		f.BrokerInside = true
		return f
	}
	ctx, cancel := context.WithTimeout(h.ctx, 5*time.Second)
	defer cancel()
	ends, err := chaos.CommittedEnds(ctx, h.adm, "webhooks.attempts")
	if err != nil {
		h.t.Errorf("%s: %v", what, err)
		return f
	}
	f.AttemptEnds = ends
	return f
}

// every runs fn every d until ctx ends or fn fails.
func every(ctx context.Context, d time.Duration, fn func(i int) error) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := fn(i); err != nil {
			return err
		}
	}
}

func run(t *testing.T, sc scenario) *chaos.Report {
	t.Helper()
	bin := binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), sc.duration+sc.settle+5*time.Minute)
	defer cancel()
	dbURL := sc.databaseURL
	if dbURL == "" {
		dbURL = pgtest.New(t).URL
	}
	dir := logDir(t)
	cl, err := chaos.NewCluster(chaos.ClusterConfig{Bin: bin, DatabaseURL: dbURL, Dir: dir,
		Dispatchers: sc.dispatchers, Partitions: sc.partitions, AllInOne: sc.allInOne})
	require.NoError(t, err)
	t.Cleanup(func() {
		cl.Close()
		if t.Failed() {
			for _, n := range cl.Names() {
				b, _ := os.ReadFile(filepath.Join(dir, n+".log"))
				t.Logf("---- %s log (last 40 lines) ----\n%s", n, tail(string(b), 40))
			}
		}
	})
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, cl.Start(ctx), "starting the cluster")
	prefix := strings.ToLower(strings.NewReplacer("/", "_", "-", "_").Replace(t.Name()))
	top, err := chaos.RegisterEndpoints(ctx, pool, "c", sc.groups)
	require.NoError(t, err)
	t.Cleanup(top.Receiver.Close)

	dlqCtx, stopDLQ := context.WithCancel(context.Background())
	dlq, err := chaos.TailDLQ(dlqCtx, cl.KafkaAddr, "webhooks.dlq")
	require.NoError(t, err)
	t.Cleanup(func() { stopDLQ(); dlq.Wait() })

	kc, err := kgo.NewClient(kgo.SeedBrokers(cl.KafkaAddr), kgo.ProducerLinger(2*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(kc.Close)

	// The endpoint index of each process is refreshed by NOTIFY; give the
	// routers a moment to see the endpoints by waiting for a probe event
	// to be delivered end to end before the load starts.
	ledger := chaos.NewLedger()
	warm := chaos.NewLedger()
	_, err = chaos.RunLoad(ctx, chaos.LoadConfig{Pool: pool, Kafka: kc, EventsTopic: "webhooks.events",
		Accounts: top.Accounts[:1], Rate: 100, Total: 1, BatchSize: 1, OutboxShare: 1, Prefix: "warm"}, warm)
	require.NoError(t, err)
	_, err = chaos.WaitSettled(ctx, chaos.CheckInput{Ledger: warm, Receivers: []*chaos.Receiver{top.Receiver},
		Subscriptions: map[string][]string{top.Accounts[0]: top.Subscriptions[top.Accounts[0]]}, Class: top.Class}, 90*time.Second)
	require.NoError(t, err)
	top.Receiver.Reset()

	h := &harness{t: t, cluster: cl, top: top, ledger: ledger, pool: pool, adm: kadm.NewClient(kc), ctx: ctx}
	roles := roleProcs(cl)
	var ready *chaos.ReadyWatch
	if sc.rideOut {
		ready = chaos.WatchReady(ctx, roles, 250*time.Millisecond)
		t.Cleanup(ready.Stop)
	}
	loadCtx, stopLoad := context.WithTimeout(ctx, sc.duration)
	defer stopLoad()
	var faultErr error
	var wg sync.WaitGroup
	if sc.faults != nil {
		wg.Go(func() { faultErr = sc.faults(loadCtx, h) })
	}
	t.Logf("load: %.0f events/s for %s (%.1f deliveries per event), prefix %s", sc.rate, sc.duration, top.DeliveriesPerEvent, prefix)
	lcfg := chaos.LoadConfig{Pool: pool, Kafka: kc, EventsTopic: "webhooks.events",
		Accounts: top.Accounts, Rate: sc.rate, BatchSize: 5, RollbackEvery: 4, InvalidEvery: 10, Prefix: "ev"}
	if sc.load != nil {
		sc.load(&lcfg)
	}
	stats, err := runLoad(loadCtx, sc, lcfg, ledger)
	require.NoError(t, err)
	wg.Wait()
	require.NoError(t, faultErr, "fault injection")
	committed, rolledBack, uncertain := ledger.Counts()
	t.Logf("load done: %d batches, %d errors, max lag %s; events committed %d, rolled back %d, uncertain %d",
		stats.Batches, stats.Errors, stats.Lag, committed, rolledBack, uncertain)

	in := chaos.CheckInput{Ledger: ledger, Receivers: []*chaos.Receiver{top.Receiver}, Subscriptions: top.Subscriptions,
		Class: top.Class, DLQ: dlq, Pool: pool}
	rep, err := settle(ctx, cl, in, sc.settle)
	require.NoError(t, err)
	dups := duplicatesPerFault(ctx, t, h)
	t.Logf("checker:\n%s\nfaults (in flight: requests of the faulted process open at the receivers, or answered with no attempt record on webhooks.attempts) and the duplicates attributed to each:\n%s", rep, dups)
	if !rep.OK() {
		t.Logf("consumer groups at the end:\n%s", chaos.GroupLag(ctx, cl.KafkaAddr))
	}
	if rep.Lost > 0 {
		t.Logf("where the lost deliveries stopped:\n%s", chaos.Trace(ctx, cl.KafkaAddr, "webhooks", rep.LostSample))
	}
	if sc.rideOut {
		ready.Stop()
		checkRodeOut(t, h, ready, roles)
	}
	require.NoError(t, cl.Unexpected(), "a process died by itself")
	if !rep.OK() {
		t.Errorf("invariants violated:\n- %s", strings.Join(rep.Problems, "\n- "))
	}
	if !dups.OK() {
		t.Errorf("duplicates above the bound (a crash: the requests in flight; anything else: none):\n- %s",
			strings.Join(dups.Problems, "\n- "))
	}
	if t.Failed() {
		t.FailNow()
	}
	require.Positive(t, rep.Delivered, "nothing delivered")
	if sc.after != nil {
		sc.after(t, rep, dups)
	}
	return rep
}

// logDir is where the cluster keeps its data and logs: a test temporary
// directory, or one kept under $HOOKD_CHAOS_LOGS when that is set (to read
// every process's whole log after a failure).
func logDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("HOOKD_CHAOS_LOGS")
	if root == "" {
		return t.TempDir()
	}
	require.NoError(t, os.MkdirAll(root, 0o755))
	dir, err := os.MkdirTemp(root, t.Name()+"-")
	require.NoError(t, err)
	t.Logf("cluster data and logs kept in %s", dir)
	return dir
}

// roleProcs returns the running processes of every role (all but the
// broker).
func roleProcs(cl *chaos.Cluster) []*chaos.Proc {
	var out []*chaos.Proc
	for _, n := range cl.Names() {
		if p := cl.Proc(n); n != chaos.RoleBroker && p != nil && !p.Exited() {
			out = append(out, p)
		}
	}
	return out
}

// runLoad runs the load, as one generator or (sc.split) as an outbox and
// an ingress generator sharing the rate.
func runLoad(ctx context.Context, sc scenario, cfg chaos.LoadConfig, l *chaos.Ledger) (chaos.LoadStats, error) {
	if !sc.split {
		return chaos.RunLoad(ctx, cfg, l)
	}
	outbox, ingress := cfg, cfg
	outbox.Rate, outbox.OutboxShare = cfg.Rate/2, 1
	ingress.Rate, ingress.OutboxShare = cfg.Rate/2, -1
	var ost chaos.LoadStats
	var oerr error
	var wg sync.WaitGroup
	wg.Go(func() { ost, oerr = chaos.RunLoad(ctx, outbox, l) })
	ist, ierr := chaos.RunLoad(ctx, ingress, l)
	wg.Wait()
	st := chaos.LoadStats{Batches: ost.Batches + ist.Batches, Events: ost.Events + ist.Events,
		Errors: ost.Errors + ist.Errors, Lag: max(ost.Lag, ist.Lag)}
	return st, errors.Join(oerr, ierr)
}

// duplicatesPerFault attributes the run's duplicates to its faults (see
// chaos.AttributeDuplicates), from the receivers' log and the attempts
// topic.
func duplicatesPerFault(ctx context.Context, t *testing.T, h *harness) *chaos.DuplicateReport {
	t.Helper()
	attempts, err := chaos.ReadAttempts(ctx, h.cluster.KafkaAddr, "webhooks.attempts")
	require.NoError(t, err)
	faults := h.faults.Faults()
	chaos.ResolveConns(faults, h.top.Receiver)
	chaos.ResolveEnds(faults, attempts)
	return chaos.AttributeDuplicates(h.top.Receiver.Requests(), faults, attempts)
}

// settle waits for the report to settle (see chaos.WaitSettled), giving up
// early once a process has exited by itself: what it left undone would
// only stall the wait.
func settle(ctx context.Context, cl *chaos.Cluster, in chaos.CheckInput, timeout time.Duration) (*chaos.Report, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tick := time.NewTicker(time.Second) // polling interval
		defer tick.Stop()
		for cl.Unexpected() == nil {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		cancel()
	}()
	return chaos.WaitSettled(ctx, in, timeout)
}

// checkRodeOut checks that every role process of the start is still the
// one running (none exited, none started again) and that its /readyz
// answered 503 during each fault and 200 after; it logs the transitions.
// A failure is reported without stopping the test, so the delivery
// invariants are checked too.
func checkRodeOut(t *testing.T, h *harness, ready *chaos.ReadyWatch, roles []*chaos.Proc) {
	t.Helper()
	windows := h.faultWindows()
	require.NotEmpty(t, windows, "the scenario recorded no fault window")
	var errs []error
	for _, p := range roles {
		if now := h.cluster.Proc(p.Name); now != p || p.Exited() {
			errs = append(errs, fmt.Errorf("%s (pid %d) is no longer running", p.Name, p.Pid()))
		}
		for _, w := range windows {
			ro, err := ready.RodeOut(p.Name, w.from, w.to)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", w.what, err))
				continue
			}
			t.Logf("%s: %s /readyz 503 %.1fs after the fault began, 200 %.1fs after it ended; transitions %s",
				w.what, p.Name, ro.Unready.Seconds(), ro.Ready.Seconds(), chaos.FormatSamples(ready.Samples(p.Name), w.from))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("the roles did not ride the fault out:\n%v", err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// healthy is the everyday mix: most accounts with two well-behaved
// endpoints, one flaky endpoint (a 503 on the first attempt of a quarter of
// the ids) and one that answers 429 Retry-After: 1 on the first attempt of
// a quarter of the ids. (Half would trip the endpoint's breaker, open for
// 30s, longer than the whole 1s,2s,4s schedule: see docs/reliability.md.)
func healthy() []chaos.EndpointGroup {
	return []chaos.EndpointGroup{
		{Class: "ok", Accounts: 6, PerAccount: 2, Behave: chaos.BehaveOK},
		{Class: "flaky_5xx", Accounts: 1, Behave: chaos.Behave5xx, FailAttempts: 1, FailEvery: 4},
		{Class: "429", Accounts: 1, Behave: chaos.Behave429, FailAttempts: 1, FailEvery: 4},
	}
}

// TestChaosShortKill9 is the scenario `make test` always runs: under load
// through the outbox (a quarter of the transactions rolled back) and the
// ingress topic, kill -9 a dispatcher among three, the relay, another
// dispatcher and the relay again, each restarted at once; then nothing may
// be lost, nothing rolled back delivered, every dead letter has a reason,
// the attempt log agrees with the receivers (requests sent = attempt rows),
// and no kill causes more duplicates than the requests in flight at it (a
// relay kill: none). (Killing the router or the attempt-log writer, one-member
// groups with a 45s session timeout, is left to `make chaos`: see
// TestChaosGroupMemberKills and docs/reliability.md.)
func TestChaosShortKill9(t *testing.T) {
	t.Parallel()
	order := []string{chaos.DispatcherName(1), chaos.RoleRelay, chaos.DispatcherName(2), chaos.RoleRelay}
	run(t, scenario{
		groups: healthy(), rate: 100, duration: 24 * time.Second, settle: 90 * time.Second,
		faults: func(ctx context.Context, h *harness) error {
			return every(ctx, 4*time.Second, func(i int) error {
				if i >= len(order) {
					return nil
				}
				return h.restart9(order[i])
			})
		},
	})
}
