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
	"sync/atomic"
	"time"

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
}

// ProcResult is one process's resource use over the saturation phase.
type ProcResult struct {
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUSecondsPer1000 float64 `json:"cpu_seconds_per_1000_deliveries"`
	PeakRSSMiB        float64 `json:"peak_rss_mib"`
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
	B0            float64                       `json:"b0_plain_http_loop_per_second"`
	B1            float64                       `json:"b1_naive_dispatcher_per_second"`
	B2            float64                       `json:"b2_river_per_second"`
	B2Note        string                        `json:"b2_note,omitempty"`
	Ratios        map[string]float64            `json:"ratios"`
	Series        map[string][]float64          `json:"throughput_series_per_second"`
	Notes         []string                      `json:"notes"`

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

type bench struct {
	cfg      *Config
	bin      string
	riverBin string
	res      *Results
	phase    atomic.Value // string
}

// Run runs every phase and writes the results under cfg.Out.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	cfg.setDefaults()
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
	stop := b.progress(ctx)
	defer stop()
	if err := b.runAll(ctx); err != nil {
		return b.res, err
	}
	return b.res, b.write()
}

func (b *bench) runAll(ctx context.Context) error {
	if !b.cfg.Skip["saturation"] {
		if err := b.onSaturationStack(ctx); err != nil {
			return err
		}
	}
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
	return nil
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
	// The baselines that need no hookd output run first, on the quiet
	// machine: after a saturation phase Postgres and the attempt-log
	// writer stay busy for a while, which would penalise whatever runs
	// next.
	if !b.cfg.Skip["b0"] {
		if err := b.b0(ctx, sat); err != nil {
			return fmt.Errorf("B0: %w", err)
		}
	}
	if !b.cfg.Skip["b2"] {
		if err := b.b2(ctx, sat); err != nil {
			b.res.B2Note = err.Error()
			b.cfg.Logger.Warn("hookbench: B2 failed", "error", err)
		}
	}
	b.waitIdle(ctx, sat)
	if err := b.saturation(ctx, sat); err != nil {
		return fmt.Errorf("saturation: %w", err)
	}
	if !b.cfg.Skip["latency"] {
		for _, pct := range []float64{0.5, 0.9} {
			b.waitIdle(ctx, sat)
			p, err := b.latency(ctx, sat, pct)
			if err != nil {
				return fmt.Errorf("latency at %.0f%%: %w", pct*100, err)
			}
			if pct == 0.5 {
				b.res.Latency50 = p
			} else {
				b.res.Latency90 = p
			}
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
				n := 0
				for _, rc := range s.receivers {
					n += len(rc.FirstOK())
				}
				delivered.Store(int64(n))
				c, _, _ := l.Counts()
				b.setPhase("%s: offered %.0f/s, committed %d, delivered %d", name, rate, c, n)
			}
		}
	}()
	defer close(done)
	lctx, cancel := context.WithTimeout(ctx, d)
	_, err := chaos.RunLoad(lctx, chaos.LoadConfig{Pool: s.pool, Kafka: s.kafka, EventsTopic: "webhooks.events",
		Accounts: accts, Rate: rate, BatchSize: batch, OutboxShare: b.cfg.OutboxShare, Workers: 16,
		Prefix: name, PayloadBytes: 200}, l)
	cancel()
	if err != nil {
		return nil, nil, 0, err
	}
	acctEP := map[string]string{}
	for _, e := range s.endpoints {
		acctEP[e.Account] = e.ID
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		ok := s.firstOK()
		lost := 0
		for id, e := range l.Snapshot() {
			if e.State == chaos.StateCommitted && !skip[acctEP[e.Account]] {
				if _, got := ok[[2]string{acctEP[e.Account], id}]; !got {
					lost++
				}
			}
		}
		if lost == 0 || time.Now().After(deadline) {
			return l, ok, lost, nil
		}
		t := time.NewTimer(500 * time.Millisecond) // polling for the last deliveries
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, lost, ctx.Err()
		case <-t.C:
		}
	}
}

// waitIdle waits until hookd's processes together use under a tenth of a
// core (the attempt-log writer catching up after a saturation phase would
// otherwise steal CPU from the next measurement), at most 3 minutes.
func (b *bench) waitIdle(ctx context.Context, s *stack) {
	deadline := time.Now().Add(3 * time.Minute)
	prev := b.procStats(s)
	for time.Now().Before(deadline) {
		t := time.NewTimer(time.Second) // sampling interval
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cur := b.procStats(s)
		var used time.Duration
		for n, st := range cur {
			used += st.CPU - prev[n].CPU
		}
		prev = cur
		b.setPhase("waiting for hookd to go idle (%.2f cores busy)", used.Seconds())
		if used < 100*time.Millisecond {
			return
		}
	}
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

func (b *bench) saturation(ctx context.Context, s *stack) error {
	before := b.procStats(s)
	start := time.Now()
	l, ok, lost, err := b.runLoad(ctx, s, "saturation", b.cfg.OfferedRate, b.cfg.Saturation, 50, nil)
	if err != nil {
		return err
	}
	after := b.procStats(s)
	committed, _, _ := l.Counts()
	var first, last time.Time
	times := make([]time.Time, 0, len(ok))
	for _, t := range ok {
		times = append(times, t)
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	r := b.res
	r.Delivered, r.Lost = len(ok), lost
	if span := last.Sub(first).Seconds(); span > 0 {
		r.Saturation = float64(len(ok)) / span
	}
	var lastCommit time.Time
	for _, e := range l.Snapshot() {
		if e.At.After(lastCommit) {
			lastCommit = e.At
		}
	}
	if span := lastCommit.Sub(start).Seconds(); span > 0 {
		r.GeneratedRate = float64(committed) / span
	}
	if r.GeneratedRate < b.cfg.OfferedRate*0.9 {
		r.Notes = append(r.Notes, fmt.Sprintf("the generator committed %.0f events/s of the %.0f offered (it shares the 2 cores)", r.GeneratedRate, b.cfg.OfferedRate))
	}
	if r.Saturation > 0.95*r.GeneratedRate && !slices.Contains(r.Notes, "hookd kept up with the generator: the saturation figure is a lower bound") {
		r.Notes = append(r.Notes, "hookd kept up with the generator: the saturation figure is a lower bound")
	}
	r.Series["saturation"] = series(times, start)
	for n, a := range after {
		bst := before[n]
		cpu := (a.CPU - bst.CPU).Seconds()
		r.Procs[n] = &ProcResult{CPUSeconds: cpu, CPUSecondsPer1000: cpu / float64(max(len(ok), 1)) * 1000, PeakRSSMiB: float64(a.HWM) / (1 << 20)}
	}
	b.cfg.Logger.Info("hookbench: saturation", "deliveries_per_s", int(r.Saturation), "delivered", len(ok), "lost", lost)
	s.resetReceivers()
	return nil
}

func (b *bench) latency(ctx context.Context, s *stack, pct float64) (*Percentiles, error) {
	rate := b.res.Saturation * pct
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
	var lat []float64
	var times []time.Time
	for id, e := range l.Snapshot() {
		if e.State != chaos.StateCommitted {
			continue
		}
		if t, got := ok[[2]string{acctEP[e.Account], id}]; got {
			lat = append(lat, float64(t.Sub(e.At))/1e6)
			times = append(times, t)
		}
	}
	p := percentiles(lat)
	p.RateS = rate
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
