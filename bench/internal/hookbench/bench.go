package hookbench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hookd/hookd/internal/pgcpu"

	"github.com/hookd/hookd/bench/chaos"
)

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	N     int     `json:"n"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	RateS float64 `json:"deliveries_per_second"`
	// Outbox and Ingress are the same for the events of each origin
	// (latency phases only): the outbox's adds the relay's hop.
	Outbox  *Percentiles `json:"outbox,omitempty"`
	Ingress *Percentiles `json:"ingress,omitempty"`
	// First and After split the same by commit time (latency phases
	// only): the events committed in the phase's first StartWindow, when
	// the load steps up from an idle stack, and the rest. The JSON names
	// say 5s: change them with StartWindow.
	First *Percentiles `json:"first_5s,omitempty"`
	After *Percentiles `json:"after_5s,omitempty"`
}

// StartWindow is the start of a latency phase reported apart: the load
// steps from an idle stack (the wait for idle before every phase) to its
// rate, and what warms up then shows in the tail.
const StartWindow = 5 * time.Second

// ProcResult is one process's resource use over the saturation phase.
type ProcResult struct {
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUSecondsPer1000 float64 `json:"cpu_seconds_per_1000_deliveries"`
	PeakRSSMiB        float64 `json:"peak_rss_mib"`
	// CostOverB0 is the process's CPU per delivery over B0's whole cost
	// per delivery (the machine's cores / B0's deliveries per second).
	CostOverB0 float64 `json:"cpu_per_delivery_over_b0_cost,omitempty"`
}

// Results is everything measured in one run.
type Results struct {
	Started time.Time `json:"started"`
	Machine string    `json:"machine"`
	Config  struct {
		Endpoints   int     `json:"endpoints"`
		Receivers   int     `json:"receivers"`
		LatencyMs   float64 `json:"receiver_latency_ms"`
		FailRate    float64 `json:"receiver_fail_rate"`
		Dispatchers int     `json:"dispatchers"`
		Partitions  int     `json:"partitions"`
		OutboxShare float64 `json:"outbox_share"`
		OfferedRate float64 `json:"offered_rate"`
		InsertBatch int     `json:"insert_batch"`
		// Scheme is how the receivers served: https or http.
		Scheme string `json:"scheme"`
		// LatencySaturation is Config.LatencySaturation (0: the measured rate).
		LatencySaturation float64 `json:"latency_saturation,omitempty"`
		// OutboxServer says the outbox was on a second Postgres server
		// (Config.OutboxDatabaseURL).
		OutboxServer bool `json:"outbox_server,omitempty"`
	} `json:"config"`
	// Saturation: end-to-end deliveries/s with the offered load above
	// capacity; GeneratedRate is what the generator managed to commit.
	Saturation    float64                       `json:"saturation_deliveries_per_second"`
	GeneratedRate float64                       `json:"generated_events_per_second"`
	Delivered     int                           `json:"saturation_delivered"`
	Lost          int                           `json:"lost"`
	Procs         map[string]*ProcResult        `json:"processes"`
	Latency50     *Percentiles                  `json:"latency_at_50pct"`
	Latency90     *Percentiles                  `json:"latency_at_90pct"`
	MemoryMiB     map[string]map[string]float64 `json:"memory_peak_rss_mib_by_endpoints"`
	Isolation     *Isolation                    `json:"isolation"`
	Tenancy       *Tenancy                      `json:"tenancy"`
	OneHost       *OneHost                      `json:"one_host"`
	Burst         *Burst                        `json:"burst"`
	B0            float64                       `json:"b0_plain_http_loop_per_second"`
	B1            float64                       `json:"b1_naive_dispatcher_per_second"`
	B2            float64                       `json:"b2_river_per_second"`
	B2Note        string                        `json:"b2_note,omitempty"`
	Ratios        map[string]float64            `json:"ratios"`
	// Postgres is the headline durability setting (--postgres, first)
	// and PostgresSettings what the server reported under it.
	Postgres         string `json:"postgres_mode"`
	PostgresSettings string `json:"postgres_settings"`
	// Writes is what Postgres wrote per delivery in the saturation phase
	// and B2Writes in B2 (River's database).
	Writes   *PGWrites `json:"postgres_writes_saturation"`
	B2Writes *PGWrites `json:"postgres_writes_b2"`
	// PerSetting is saturation and B2 under each --postgres setting, the
	// headline first.
	PerSetting []*SettingRun `json:"per_postgres_setting"`
	// Stages50 is each stage's latency at 50% of saturation.
	Stages50 []StageLatency `json:"stage_latency_at_50pct"`
	// B0CostUs is B0's whole cost per delivery: cores / B0 rate, in µs.
	B0CostUs float64 `json:"b0_cost_per_delivery_us"`
	// DispatchCostOverB0 and HookdCostOverB0 are the dispatchers' and all
	// hookd processes' CPU per delivery in the saturation phase over
	// B0CostUs.
	DispatchCostOverB0 float64   `json:"dispatch_cpu_per_delivery_over_b0_cost"`
	HookdCostOverB0    float64   `json:"hookd_cpu_per_delivery_over_b0_cost"`
	ScaleOut           *ScaleOut `json:"scale_out"`
	// AttemptLogCatchUpS is how long after the saturation phase's last
	// delivery the delivery log showed all of them delivered.
	AttemptLogCatchUpS float64 `json:"attempt_log_catch_up_seconds"`
	// LoggedRate is the saturation phase's deliveries per second counted
	// up to the delivery log showing the last of them delivered.
	LoggedRate float64              `json:"saturation_logged_deliveries_per_second"`
	Series     map[string][]float64 `json:"throughput_series_per_second"`
	Notes      []string             `json:"notes"`

	cdf map[string][]float64
}

// Isolation compares healthy endpoints with and without one hanging.
type Isolation struct {
	Rate            float64      `json:"offered_events_per_second"`
	Without         *Percentiles `json:"healthy_without_hanging"`
	With            *Percentiles `json:"healthy_with_hanging"`
	ThroughputRatio float64      `json:"throughput_ratio"`
	P99Ratio        float64      `json:"p99_ratio_without_over_with"`
}

// SettingRun is the saturation phase and B2 under one Postgres setting.
type SettingRun struct {
	Mode        string     `json:"mode"`
	Settings    string     `json:"settings"`
	Saturation  float64    `json:"saturation_deliveries_per_second"`
	Delivered   int        `json:"saturation_delivered"`
	Lost        int        `json:"lost"`
	B2          float64    `json:"b2_river_per_second"`
	B2Note      string     `json:"b2_note,omitempty"`
	HookdOverB2 float64    `json:"hookd_over_b2"`
	Writes      *PGWrites  `json:"postgres_writes_saturation"`
	B2Writes    *PGWrites  `json:"postgres_writes_b2"`
	CPU         CPUByParty `json:"cpu_us_per_delivery_by_party"`
}

// CPUByParty is CPU µs per delivery by who spent it, in the saturation
// phase (hookd) and in B2 (River): the system measured (its own processes
// and its Postgres server) apart from hookbench, whose generator and
// verifying receivers share the 2 cores and so dilute the throughput ratio
// towards 1.
type CPUByParty struct {
	// Hookd is every hookd process; HookdPostgres the Postgres server
	// during the saturation phase (the generator's outbox inserts, the
	// application's own writes, included).
	Hookd         float64 `json:"hookd"`
	HookdPostgres float64 `json:"hookd_postgres"`
	// River is the river-sender process (its job inserts, 256 workers,
	// their HTTP client); RiverPostgres the server during B2 (the inserts
	// included).
	River         float64 `json:"river"`
	RiverPostgres float64 `json:"river_postgres"`
	// HarnessHookd and HarnessRiver are hookbench itself (receivers, and
	// the generator and its ledger in hookd's phase) during each.
	HarnessHookd float64 `json:"hookbench_during_hookd"`
	HarnessRiver float64 `json:"hookbench_during_river"`
	// RiverOverHookd is (River + RiverPostgres) / (Hookd + HookdPostgres).
	RiverOverHookd float64 `json:"river_over_hookd"`
}

// ratio sets RiverOverHookd when all four parts were measured (0 stands
// for not measured).
func (c *CPUByParty) ratio() {
	c.RiverOverHookd = 0
	if c.Hookd > 0 && c.HookdPostgres > 0 && c.River > 0 && c.RiverPostgres > 0 {
		c.RiverOverHookd = (c.River + c.RiverPostgres) / (c.Hookd + c.HookdPostgres)
	}
}

// ScaleOut is the saturation phase with ScaleOutDispatchers dispatchers
// against the headline's.
type ScaleOut struct {
	Dispatchers int                    `json:"dispatchers"`
	Saturation  float64                `json:"saturation_deliveries_per_second"`
	Delivered   int                    `json:"delivered"`
	Lost        int                    `json:"lost"`
	Procs       map[string]*ProcResult `json:"processes"`
	// DispatchCPUUs and HookdCPUUs are CPU µs per delivery of the
	// dispatchers together and of every hookd process.
	DispatchCPUUs float64 `json:"dispatch_cpu_us_per_delivery"`
	HookdCPUUs    float64 `json:"hookd_cpu_us_per_delivery"`
}

type bench struct {
	cfg      *Config
	pg       *pgSettings
	pgCPU    pgcpu.Meter
	bin      string
	riverBin string
	// tls is the receivers' CA and certificate; nil over http.
	tls   *receiverTLS
	res   *Results
	phase atomic.Value // string
}

// Run runs every phase and writes the results under cfg.Out.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	binDir, err := os.MkdirTemp("", "hookbench-bin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(binDir)
	b := &bench{cfg: &cfg, res: &Results{Started: time.Now(), Procs: map[string]*ProcResult{}, Ratios: map[string]float64{},
		Series: map[string][]float64{}, MemoryMiB: map[string]map[string]float64{}, cdf: map[string][]float64{}}}
	b.res.Machine = machine()
	c := &b.res.Config
	c.Endpoints, c.Receivers, c.LatencyMs, c.FailRate = cfg.Endpoints, cfg.Receivers, float64(cfg.Latency)/1e6, cfg.FailRate
	c.Dispatchers, c.Partitions, c.OutboxShare, c.OfferedRate = cfg.Dispatchers, cfg.Partitions, cfg.OutboxShare, cfg.OfferedRate
	c.InsertBatch, c.Scheme, c.LatencySaturation = cfg.InsertBatch, cfg.Scheme, cfg.LatencySaturation
	c.OutboxServer = cfg.OutboxDatabaseURL != ""
	if cfg.Scheme == SchemeHTTPS {
		if b.tls, err = newReceiverTLS(binDir); err != nil {
			return nil, err
		}
	}
	cfg.Logger.Info("hookbench: building hookd")
	if b.bin, err = chaos.BuildHookd(ctx, binDir); err != nil {
		return nil, err
	}
	if !cfg.Skip["b2"] {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(binDir, "river-sender"), ".")
		cmd.Dir = filepath.Join(chaos.ModuleRoot(), "bench", "river")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.res.B2Note = fmt.Sprintf("river-sender did not build: %v %s", err, out)
			cfg.Skip["b2"] = true
		} else {
			b.riverBin = filepath.Join(binDir, "river-sender")
		}
	}
	b.pg = &pgSettings{base: cfg.DatabaseURL}
	defer b.pg.restore()
	if pm, err := pgcpu.PostmasterPID(ctx, cfg.DatabaseURL); err != nil {
		b.addNote(fmt.Sprintf("Postgres CPU not measured: %v", err))
	} else {
		b.pgCPU = pgcpu.Meter{Postmaster: pm}
	}
	stop := b.progress(ctx)
	defer stop()
	if err := b.runAll(ctx); err != nil {
		return b.res, err
	}
	return b.res, b.write()
}

func (b *bench) runAll(ctx context.Context) error {
	modes := b.cfg.Postgres
	r := b.res
	r.Postgres = modes[0]
	var err error
	if r.PostgresSettings, err = b.pg.use(ctx, modes[0]); err != nil {
		return err
	}
	b.cfg.Logger.Info("hookbench: postgres", "mode", modes[0], "settings", r.PostgresSettings)
	if !b.cfg.Skip["saturation"] {
		if err := b.onSaturationStack(ctx); err != nil {
			return err
		}
		if !b.cfg.Skip["scaleout"] && b.cfg.ScaleOutDispatchers > 0 {
			if err := b.scaleOut(ctx); err != nil {
				return fmt.Errorf("scale-out with %d dispatchers: %w", b.cfg.ScaleOutDispatchers, err)
			}
		}
	}
	if err := b.otherPhases(ctx); err != nil {
		return err
	}
	if !b.cfg.Skip["saturation"] {
		for _, m := range modes[1:] {
			if err := b.otherSetting(ctx, m); err != nil {
				return fmt.Errorf("postgres %s: %w", m, err)
			}
		}
	}
	b.ratios()
	return nil
}

// otherPhases runs the phases on stacks of their own: isolation, tenancy,
// memory and one host.
func (b *bench) otherPhases(ctx context.Context) error {
	if !b.cfg.Skip["isolation"] {
		if err := b.isolation(ctx); err != nil {
			return fmt.Errorf("isolation: %w", err)
		}
	}
	if !b.cfg.Skip["tenancy"] {
		if err := b.tenancy(ctx); err != nil {
			return fmt.Errorf("tenancy: %w", err)
		}
	}
	if !b.cfg.Skip["memory"] {
		for _, n := range b.cfg.MemoryEndpoints {
			if err := b.memory(ctx, n); err != nil {
				return fmt.Errorf("memory with %d endpoints: %w", n, err)
			}
		}
	}
	if !b.cfg.Skip["onehost"] {
		if err := b.oneHost(ctx); err != nil {
			return fmt.Errorf("one host: %w", err)
		}
	}
	if !b.cfg.Skip["burst"] {
		if err := b.burst(ctx); err != nil {
			return fmt.Errorf("burst: %w", err)
		}
	}
	return nil
}

// ratios computes the ratios against the baselines and the CPU cost per
// delivery against B0's.
func (b *bench) ratios() {
	r := b.res
	if r.B0 > 0 {
		r.Ratios["hookd/B0"] = r.Saturation / r.B0
	}
	if r.B1 > 0 {
		r.Ratios["hookd/B1"] = r.Saturation / r.B1
	}
	if r.B2 > 0 {
		r.Ratios["hookd/B2"] = r.Saturation / r.B2
	}
	for _, st := range r.PerSetting {
		if st.B2 > 0 {
			st.HookdOverB2 = st.Saturation / st.B2
		}
	}
	if r.B0 <= 0 || r.Delivered == 0 {
		return
	}
	r.B0CostUs = float64(numCPU()) / r.B0 * 1e6
	for n, p := range r.Procs {
		p.CostOverB0 = p.CPUSeconds / float64(r.Delivered) * 1e6 / r.B0CostUs
		r.HookdCostOverB0 += p.CostOverB0
		if strings.HasPrefix(n, "dispatch") {
			r.DispatchCostOverB0 += p.CostOverB0
		}
	}
}

// onSaturationStack runs the phases that share the saturation stack: the
// baselines B0 and B2, saturation, latency at 50% and 90% of it, B1.
// Skipping saturation skips them all (latency is a share of it).
func (b *bench) onSaturationStack(ctx context.Context) error {
	sat, err := b.newStack(ctx, stackParams{endpoints: b.cfg.Endpoints, partitions: b.cfg.Partitions})
	if err != nil {
		return fmt.Errorf("starting hookd: %w", err)
	}
	defer sat.close()
	r := b.res
	st := &SettingRun{Mode: r.Postgres, Settings: r.PostgresSettings}
	r.PerSetting = append(r.PerSetting, st)
	// The baselines that need no hookd output run first, on the quiet
	// machine: after a saturation phase Postgres and the attempt-log
	// writer stay busy for a while, which would penalise whatever runs
	// next.
	if !b.cfg.Skip["b0"] {
		if err := b.b0(ctx, sat); err != nil {
			return fmt.Errorf("B0: %w", err)
		}
	}
	b.runB2(ctx, sat, st)
	r.B2, r.B2Note, r.B2Writes = st.B2, st.B2Note, st.B2Writes
	b.waitIdle(ctx, sat)
	m, err := b.saturation(ctx, sat, "saturation")
	if err != nil {
		return fmt.Errorf("saturation: %w", err)
	}
	r.Saturation, r.Delivered, r.Lost, r.Procs, r.Writes = m.rate, m.delivered, r.Lost+m.lost, m.procs, m.writes
	st.Saturation, st.Delivered, st.Lost, st.Writes = m.rate, m.delivered, m.lost, m.writes
	st.setSaturationCPU(m)
	r.GeneratedRate, r.AttemptLogCatchUpS, r.LoggedRate = m.generated, m.logLag.Seconds(), m.logRate
	b.noteGenerator(m)
	if !b.cfg.Skip["latency"] {
		if err := b.latencies(ctx, sat); err != nil {
			return err
		}
	}
	// B1 replays the deliveries topic the phases above filled.
	if !b.cfg.Skip["b1"] {
		b.waitIdle(ctx, sat)
		if err := b.b1(ctx, sat); err != nil {
			return fmt.Errorf("B1: %w", err)
		}
	}
	return nil
}

// runB2 runs B2 (unless skipped) and records it in st.
func (b *bench) runB2(ctx context.Context, s *stack, st *SettingRun) {
	if b.cfg.Skip["b2"] {
		st.B2Note = b.res.B2Note
		return
	}
	run, err := b.b2(ctx, s)
	st.B2, st.B2Writes, st.B2Note = run.rate, run.writes, run.note
	st.CPU.River, st.CPU.HarnessRiver = run.senderCPUUs, run.harnessCPUUs
	if run.writes != nil {
		st.CPU.RiverPostgres = run.writes.ServerCPUUsPerDelivery
	}
	st.CPU.ratio()
	if err != nil {
		st.B2Note = err.Error()
		b.cfg.Logger.Warn("hookbench: B2 failed", "error", err)
	}
}

// latencies runs the 50% and 90% phases; the 50% one also reads the stage
// histograms of every hookd process before and after.
func (b *bench) latencies(ctx context.Context, sat *stack) error {
	for _, pct := range []float64{0.5, 0.9} {
		b.waitIdle(ctx, sat)
		var before map[string]*stageHist
		if pct == 0.5 {
			before = b.scrapeStages(ctx, sat)
		}
		p, err := b.latency(ctx, sat, pct)
		if err != nil {
			return fmt.Errorf("latency at %.0f%%: %w", pct*100, err)
		}
		if pct == 0.5 {
			b.res.Latency50 = p
			b.res.Stages50 = stageLatencies(before, b.scrapeStages(ctx, sat))
			if len(b.res.Stages50) == 0 {
				b.addNote("no hookd_stage_latency_seconds observations at 50% of saturation: this hookd build does not record stage latencies")
			}
		} else {
			b.res.Latency90 = p
		}
	}
	return nil
}

// scaleOut repeats the saturation phase on a fresh stack with
// ScaleOutDispatchers dispatch processes.
func (b *bench) scaleOut(ctx context.Context) error {
	n := b.cfg.ScaleOutDispatchers
	b.setPhase("scale-out: starting hookd with %d dispatchers", n)
	s, err := b.newStack(ctx, stackParams{endpoints: b.cfg.Endpoints, partitions: b.cfg.Partitions, dispatchers: n})
	if err != nil {
		return err
	}
	defer s.close()
	b.waitIdle(ctx, s)
	m, err := b.saturation(ctx, s, fmt.Sprintf("saturation_%d_dispatchers", n))
	if err != nil {
		return err
	}
	so := &ScaleOut{Dispatchers: n, Saturation: m.rate, Delivered: m.delivered, Lost: m.lost, Procs: m.procs}
	so.DispatchCPUUs, so.HookdCPUUs = cpuPerDelivery(m.procs, m.delivered)
	b.res.ScaleOut = so
	b.res.Lost += m.lost
	b.cfg.Logger.Info("hookbench: scale-out", "dispatchers", n, "deliveries_per_s", int(m.rate),
		"dispatch_cpu_us", int(so.DispatchCPUUs), "hookd_cpu_us", int(so.HookdCPUUs))
	return nil
}

// cpuPerDelivery returns the dispatchers' and all processes' CPU µs per
// delivery.
func cpuPerDelivery(procs map[string]*ProcResult, delivered int) (dispatch, all float64) {
	d := float64(max(delivered, 1))
	for n, p := range procs {
		all += p.CPUSeconds / d * 1e6
		if strings.HasPrefix(n, "dispatch") {
			dispatch += p.CPUSeconds / d * 1e6
		}
	}
	return dispatch, all
}

// otherSetting switches Postgres to mode and repeats B2 and the saturation
// phase on a fresh stack.
func (b *bench) otherSetting(ctx context.Context, mode string) error {
	settings, err := b.pg.use(ctx, mode)
	if err != nil {
		return err
	}
	b.cfg.Logger.Info("hookbench: postgres", "mode", mode, "settings", settings)
	st := &SettingRun{Mode: mode, Settings: settings}
	b.setPhase("postgres %s: starting hookd", mode)
	s, err := b.newStack(ctx, stackParams{endpoints: b.cfg.Endpoints, partitions: b.cfg.Partitions})
	if err != nil {
		return err
	}
	defer s.close()
	b.runB2(ctx, s, st)
	b.waitIdle(ctx, s)
	m, err := b.saturation(ctx, s, "saturation_"+mode)
	if err != nil {
		return err
	}
	st.Saturation, st.Delivered, st.Lost, st.Writes = m.rate, m.delivered, m.lost, m.writes
	st.setSaturationCPU(m)
	b.res.Lost += m.lost
	b.res.PerSetting = append(b.res.PerSetting, st)
	return nil
}

func (b *bench) addNote(n string) {
	if !slices.Contains(b.res.Notes, n) {
		b.res.Notes = append(b.res.Notes, n)
	}
}

func (b *bench) noteGenerator(m *satRun) {
	if m.generated < b.cfg.OfferedRate*0.9 {
		b.addNote(fmt.Sprintf("the generator committed %.0f events/s of the %.0f offered (it shares the 2 cores)", m.generated, b.cfg.OfferedRate))
	}
	if m.rate > 0.95*m.generated {
		b.addNote("hookd kept up with the generator: the saturation figure is a lower bound")
	}
}

// progress prints one line every 5 seconds while the benchmark runs.
func (b *bench) progress(ctx context.Context) func() {
	b.phase.Store("starting")
	ctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	go func() {
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "hookbench: %4.0fs  %s\n", time.Since(start).Seconds(), b.phase.Load())
			}
		}
	}()
	return cancel
}

func (b *bench) setPhase(format string, args ...any) { b.phase.Store(fmt.Sprintf(format, args...)) }

// runLoad runs the generator at rate for d and waits until every committed
// event was delivered (or timeout). It returns the ledger and the number of
// committed events never delivered.
func (b *bench) runLoad(ctx context.Context, s *stack, name string, rate float64, d time.Duration, batch int, skip map[string]bool) (*chaos.Ledger, map[[2]string]time.Time, int, error) {
	return b.runLoadN(ctx, s, name, rate, d, batch, 0, skip)
}

// runLoadN is runLoad stopping after total events (0: when d ends).
func (b *bench) runLoadN(ctx context.Context, s *stack, name string, rate float64, d time.Duration, batch, total int, skip map[string]bool) (*chaos.Ledger, map[[2]string]time.Time, int, error) {
	l := chaos.NewLedger()
	accts := s.accounts()
	var delivered atomic.Int64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n := s.okCount() // not len(FirstOK()): a copy of every pair each second took 13% of hookbench's CPU
				delivered.Store(int64(n))
				c, _, _ := l.Counts()
				b.setPhase("%s: offered %.0f/s, committed %d, delivered %d", name, rate, c, n)
			}
		}
	}()
	defer close(done)
	lctx, cancel := context.WithTimeout(ctx, d)
	_, err := chaos.RunLoad(lctx, chaos.LoadConfig{Pool: s.outbox, Kafka: s.kafka, EventsTopic: "webhooks.events",
		Accounts: accts, Rate: rate, Total: total, BatchSize: batch, OutboxShare: b.cfg.OutboxShare, Workers: 16,
		Prefix: name, PayloadBytes: 200}, l)
	cancel()
	if err != nil {
		return nil, nil, 0, err
	}
	acctEP := map[string]string{}
	for _, e := range s.endpoints {
		acctEP[e.Account] = e.ID
	}
	want := 0 // committed events hookd must deliver
	l.Each(func(_ string, e chaos.EventInfo) {
		if e.State == chaos.StateCommitted && !skip[acctEP[e.Account]] {
			want++
		}
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		// Count before comparing: copying every pair and event each time
		// took most of a core while hookd was still catching up.
		if s.okCount() >= want || time.Now().After(deadline) {
			if ok, lost := undelivered(s, l, acctEP, skip); lost == 0 || time.Now().After(deadline) {
				return l, ok, lost, nil
			}
		}
		t := time.NewTimer(500 * time.Millisecond) // polling for the last deliveries
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, 0, ctx.Err()
		case <-t.C:
		}
	}
}

// undelivered returns the first 2xx of each of this phase's deliveries and
// how many committed events (of endpoints not skipped) have none.
func undelivered(s *stack, l *chaos.Ledger, acctEP map[string]string, skip map[string]bool) (map[[2]string]time.Time, int) {
	ok := s.firstOK()
	// Only this phase's events count: a request of the phase before (B0's
	// last, answered after its receivers were reset) is not hookd's
	// delivery.
	for k := range ok {
		if _, ours := l.Get(k[1]); !ours {
			delete(ok, k)
		}
	}
	lost := 0
	l.Each(func(id string, e chaos.EventInfo) {
		if e.State == chaos.StateCommitted && !skip[acctEP[e.Account]] {
			if _, got := ok[[2]string{acctEP[e.Account], id}]; !got {
				lost++
			}
		}
	})
	return ok, lost
}

// waitIdle waits until hookd's processes and the Postgres server together
// use under a tenth of a core (the attempt-log writer, Postgres and its
// autovacuum catching up after a saturation phase would otherwise steal
// CPU from the next measurement), at most 3 minutes.
func (b *bench) waitIdle(ctx context.Context, s *stack) {
	deadline := time.Now().Add(3 * time.Minute)
	prev := b.procStats(s)
	prevPG := b.pgCPU.Read().Total
	for time.Now().Before(deadline) {
		if pause(ctx, time.Second) != nil { // sampling interval
			return
		}
		cur := b.procStats(s)
		curPG := b.pgCPU.Read().Total
		var used time.Duration
		for n, st := range cur {
			used += st.CPU - prev[n].CPU
		}
		pgUsed := curPG - prevPG
		prev, prevPG = cur, curPG
		b.setPhase("waiting for hookd and Postgres to go idle (%.2f + %.2f cores busy)", used.Seconds(), pgUsed.Seconds())
		if used+pgUsed < 100*time.Millisecond {
			return
		}
	}
	b.cfg.Logger.Warn("hookbench: hookd and Postgres still busy after 3 minutes; measuring anyway")
}

func (b *bench) procStats(s *stack) map[string]chaos.ProcStats {
	out := map[string]chaos.ProcStats{}
	for _, n := range s.cluster.Names() {
		p := s.cluster.Proc(n)
		if p == nil || p.Exited() {
			continue
		}
		if st, err := chaos.ReadProcStats(p.Pid()); err == nil {
			out[n] = st
		}
	}
	return out
}

// setSaturationCPU records who spent the CPU of the saturation phase m.
func (st *SettingRun) setSaturationCPU(m *satRun) {
	st.CPU.Hookd, st.CPU.HarnessHookd = m.hookdCPUUs, m.harnessCPUUs
	if m.writes != nil {
		st.CPU.HookdPostgres = m.writes.ServerCPUUsPerDelivery
	}
	st.CPU.ratio()
}

// selfCPU is hookbench's own CPU time so far (0 if /proc cannot be read).
func selfCPU() time.Duration {
	st, err := chaos.ReadProcStats(os.Getpid())
	if err != nil {
		return 0
	}
	return st.CPU
}

// perDeliveryUs is cpu in µs per delivery (0 without deliveries).
func perDeliveryUs(cpu time.Duration, deliveries int) float64 {
	if deliveries <= 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / float64(deliveries)
}

// loggedDelivered counts the deliveries the delivery log shows delivered.
func (s *stack) loggedDelivered(ctx context.Context) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM webhooks.deliveries WHERE status = 'delivered'").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting logged deliveries: %w", err)
	}
	return n, nil
}

// metricDelivered adds up the delivered attempts the attempt-log writers
// have logged (hookd_attempts_total{outcome="delivered"}), a cheap sign of
// the log's progress: counting the delivery rows every half second cost
// Postgres more than a quarter of its time while the writer caught up.
func (s *stack) metricDelivered(ctx context.Context) float64 {
	var n float64
	for _, name := range s.cluster.Names() {
		p := s.cluster.Proc(name)
		if name != chaos.RoleAttemptLog || p == nil || p.Listen == "" || p.Exited() {
			continue
		}
		m, err := scrape(ctx, "http://"+p.Listen+"/metrics")
		if err != nil {
			continue
		}
		for series, v := range m {
			if name, labels := splitSeries(series); name == "hookd_attempts_total" && labels["outcome"] == "delivered" {
				n += v
			}
		}
	}
	return n
}

// waitLogged waits (at most 5 minutes) until the delivery log shows want
// deliveries delivered, so that the phase's CPU and Postgres figures
// include the attempt-log writer catching up, and returns how long that
// took. It follows the writers' metrics (from metricBefore, grown by
// delivered) and counts the rows only once they say the log is complete.
func (b *bench) waitLogged(ctx context.Context, s *stack, want int, metricBefore float64, delivered int) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	for {
		if got := s.metricDelivered(ctx) - metricBefore; got < float64(delivered) && time.Now().Before(deadline) {
			b.setPhase("waiting for the attempt log: %.0f of %d deliveries logged", got, delivered)
			if err := pause(ctx, 250*time.Millisecond); err != nil {
				return 0, err
			}
			continue
		}
		n, err := s.loggedDelivered(ctx)
		if err != nil {
			return 0, err
		}
		if n >= want {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			b.addNote(fmt.Sprintf("the delivery log showed %d of %d deliveries 5 minutes after the saturation phase: its CPU and Postgres figures are lower bounds", n, want))
			return time.Since(start), nil
		}
		b.setPhase("waiting for the attempt log: %d of %d deliveries logged", n, want)
		if err := pause(ctx, 2*time.Second); err != nil {
			return 0, err
		}
	}
}

// satRun is one saturation phase's measurements.
type satRun struct {
	rate, generated float64
	delivered, lost int
	procs           map[string]*ProcResult
	writes          *PGWrites
	// hookdCPUUs and harnessCPUUs are every hookd process's and
	// hookbench's own CPU µs per delivery over the phase.
	hookdCPUUs, harnessCPUUs float64
	// logLag is how long after the last delivery the delivery log showed
	// every delivery of the phase delivered.
	logLag time.Duration
	// logRate is deliveries per second from the first delivery to the
	// delivery log showing the last one delivered.
	logRate float64
}

// saturation offers OfferedRate for Saturation and measures the delivery
// rate, each hookd process's CPU up to the moment the delivery log shows
// every delivery (the attempt-log writer's catch-up counts), and what
// Postgres wrote and spent up to the moment hookd and Postgres are idle
// again (its autovacuum counts). hookd's CPU is not taken after the wait
// for idle: an idle stack still uses some CPU (the dispatcher's fetches
// wait at most 10ms), and on a slow host it stays above waitIdle's
// threshold, which added up to 3 minutes of idle CPU to the phase.
func (b *bench) saturation(ctx context.Context, s *stack, name string) (*satRun, error) {
	pgBefore, pgErr := pgStats(ctx, s.dbURL)
	logged, err := s.loggedDelivered(ctx)
	metricBefore := s.metricDelivered(ctx)
	if err != nil {
		return nil, err
	}
	before := b.procStats(s)
	selfBefore := selfCPU()
	pgCPUBefore := b.pgCPU.Read()
	start := time.Now()
	l, ok, lost, err := b.runLoad(ctx, s, name, b.cfg.OfferedRate, b.cfg.Saturation, b.cfg.InsertBatch, nil)
	if err != nil {
		return nil, err
	}
	m := &satRun{delivered: len(ok), lost: lost, procs: map[string]*ProcResult{}}
	if m.logLag, err = b.waitLogged(ctx, s, logged+len(ok), metricBefore, len(ok)); err != nil {
		return nil, err
	}
	after := b.procStats(s)
	m.harnessCPUUs = perDeliveryUs(selfCPU()-selfBefore, len(ok))
	b.waitIdle(ctx, s)
	pgCPUAfter := b.pgCPU.Read()
	if pgErr == nil {
		var pgAfter pgSnapshot
		if pgAfter, pgErr = pgStats(ctx, s.dbURL); pgErr == nil {
			m.writes = writesBetween(pgBefore, pgAfter, len(ok), "webhooks.outbox")
			m.writes.ServerCPUUsPerDelivery, m.writes.WALSenderCPUUsPerDelivery = pgcpu.PerDelivery(pgCPUBefore, pgCPUAfter, len(ok))
		}
	}
	if pgErr != nil {
		b.addNote(fmt.Sprintf("%s: Postgres counters not read: %v", name, pgErr))
	}
	times := make([]time.Time, 0, len(ok))
	for _, t := range ok {
		times = append(times, t)
	}
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	if len(times) > 1 {
		if span := times[len(times)-1].Sub(times[0]).Seconds(); span > 0 {
			m.rate = float64(len(ok)) / span
			m.logRate = float64(len(ok)) / (span + m.logLag.Seconds())
		}
	}
	committed, _, _ := l.Counts()
	var lastCommit time.Time
	l.Each(func(_ string, e chaos.EventInfo) {
		if e.At.After(lastCommit) {
			lastCommit = e.At
		}
	})
	if span := lastCommit.Sub(start).Seconds(); span > 0 {
		m.generated = float64(committed) / span
	}
	b.res.Series[name] = series(times, start)
	for n, a := range after {
		cpu := (a.CPU - before[n].CPU).Seconds()
		m.procs[n] = &ProcResult{CPUSeconds: cpu, CPUSecondsPer1000: cpu / float64(max(len(ok), 1)) * 1000, PeakRSSMiB: float64(a.HWM) / (1 << 20)}
		m.hookdCPUUs += perDeliveryUs(a.CPU-before[n].CPU, len(ok))
	}
	args := []any{"phase", name, "deliveries_per_s", int(m.rate), "delivered", len(ok), "lost", lost,
		"attempt_log_catch_up_s", m.logLag.Seconds()}
	if m.writes != nil {
		args = append(args, "rows_per_delivery", m.writes.RowsPerDelivery, "wal_bytes_per_delivery", int(m.writes.WALBytesPerDelivery))
	}
	b.cfg.Logger.Info("hookbench: saturation", args...)
	s.resetReceivers()
	return m, nil
}

func (b *bench) latency(ctx context.Context, s *stack, pct float64) (*Percentiles, error) {
	rate := b.res.Saturation * pct
	if b.cfg.LatencySaturation > 0 {
		rate = b.cfg.LatencySaturation * pct
	}
	name := fmt.Sprintf("latency%.0f", pct*100)
	start := time.Now()
	l, ok, lost, err := b.runLoad(ctx, s, name, rate, b.cfg.Phase, 10, nil)
	if err != nil {
		return nil, err
	}
	b.res.Lost += lost
	acctEP := map[string]string{}
	for _, e := range s.endpoints {
		acctEP[e.Account] = e.ID
	}
	var lat, outbox, ingress, first, after []float64
	var times []time.Time
	l.Each(func(id string, e chaos.EventInfo) {
		if e.State != chaos.StateCommitted {
			return
		}
		if t, got := ok[[2]string{acctEP[e.Account], id}]; got {
			ms := float64(t.Sub(e.At)) / 1e6
			lat = append(lat, ms)
			if e.Outbox {
				outbox = append(outbox, ms)
			} else {
				ingress = append(ingress, ms)
			}
			if e.At.Sub(start) < StartWindow {
				first = append(first, ms)
			} else {
				after = append(after, ms)
			}
			times = append(times, t)
		}
	})
	p := percentiles(lat)
	p.RateS = rate
	p.Outbox, p.Ingress = percentiles(outbox), percentiles(ingress)
	p.First, p.After = percentiles(first), percentiles(after)
	b.res.Series[name] = series(times, start)
	b.res.cdf[fmt.Sprintf("%.0f%% of saturation", pct*100)] = lat
	b.cfg.Logger.Info("hookbench: latency", "load", name, "rate", int(rate), "p50_ms", p.P50, "p99_ms", p.P99, "p999_ms", p.P999)
	s.resetReceivers()
	return p, nil
}

func percentiles(lat []float64) *Percentiles {
	p := &Percentiles{N: len(lat)}
	if len(lat) == 0 {
		return p
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	p.P50, p.P99, p.P999, p.Max = at(0.5), at(0.99), at(0.999), lat[len(lat)-1]
	return p
}

// series buckets times into per-second counts from start.
func series(times []time.Time, start time.Time) []float64 {
	var out []float64
	for _, t := range times {
		i := int(t.Sub(start).Seconds())
		if i < 0 {
			continue
		}
		for len(out) <= i {
			out = append(out, 0)
		}
		out[i]++
	}
	return out
}

func (b *bench) write() error {
	js, err := json.MarshalIndent(b.res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.cfg.Out, "results.json"), js, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.cfg.Out, "results.md"), []byte(b.res.Markdown()), 0o644); err != nil {
		return err
	}
	names := make([]string, 0, len(b.res.Series))
	for n := range b.res.Series {
		names = append(names, n)
	}
	sort.Strings(names)
	if err := writeLinePlot(filepath.Join(b.cfg.Out, "throughput.png"), b.res.Series, names); err != nil {
		return err
	}
	return writeCDF(filepath.Join(b.cfg.Out, "latency_cdf.png"), b.res.cdf)
}

func machine() string {
	cpu := "unknown cpu"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range splitLines(string(b)) {
			if len(line) > 10 && line[:10] == "model name" {
				if i := indexByte(line, ':'); i > 0 {
					cpu = line[i+2:]
				}
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores", cpu, numCPU())
}
