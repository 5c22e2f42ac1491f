package hookbench

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Goals of issue 15 (and the earlier hookd/B0 one).
const (
	goalHookdOverB0        = 0.60
	goalHookdOverB2        = 2.0 // durable Postgres
	goalHookdOverB2Fsync   = 1.0 // fsync=off
	goalP99At50Ms          = 100.0
	goalRowsPerDelivery    = 1.5
	goalDispatchCostOverB0 = 0.4
	goalHookdCostOverB0    = 0.8
	// Issue 28: TLS handshakes (full and resumed) per 1,000 deliveries
	// to 1,000 endpoints on one host, after warm-up.
	goalOneHostHandshakesPer1000 = 1.0
)

// met marks a goal: "met" or "**not met**", "" without a measurement.
func met(measured bool, ok bool) string {
	switch {
	case !measured:
		return ""
	case ok:
		return "met"
	default:
		return "**not met**"
	}
}

// Markdown renders the results as the tables of docs/benchmarks.md.
func (r *Results) Markdown() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "hookbench run of %s on %s\n\n", r.Started.Format("2006-01-02 15:04 MST"), r.Machine)
	fmt.Fprintf(&b, "%d endpoints on %d receivers over %s (%.0f ms answer, %.0f%% first-attempt 503), %d dispatcher(s), %d partitions, %.0f%% of events through the outbox, %d events per application transaction (saturation and B2); Postgres %s (%s)\n\n",
		c.Endpoints, c.Receivers, schemeText(c.Scheme), c.LatencyMs, c.FailRate*100, c.Dispatchers, c.Partitions, c.OutboxShare*100, c.InsertBatch, r.Postgres, r.PostgresSettings)
	if c.OutboxServer {
		b.WriteString("The outbox on a second Postgres server (--outbox-database-url): the relay streams from it, every other role uses the first; Postgres CPU, rows, WAL and the wait for idle count the first server only.\n\n")
	}
	if c.LatencySaturation > 0 {
		fmt.Fprintf(&b, "Latency phases at 50%% and 90%% of %.0f deliveries/s (--latency-saturation), not of the saturation this run measured.\n\n", c.LatencySaturation)
	}
	r.mainTable(&b)
	r.settingsTable(&b)
	r.cpuByPartyTable(&b)
	r.stagesTable(&b)
	r.procTable(&b)
	r.scaleOutTable(&b)
	r.oneHostTable(&b)
	r.burstTable(&b)
	r.writesTable(&b)
	r.memoryTable(&b)
	if len(r.Notes) > 0 {
		fmt.Fprintf(&b, "\nNotes:\n- %s\n", strings.Join(r.Notes, "\n- "))
	}
	return b.String()
}

func (r *Results) memoryTable(b *strings.Builder) {
	if len(r.MemoryMiB) > 0 {
		counts := make([]string, 0, len(r.MemoryMiB))
		for k := range r.MemoryMiB {
			counts = append(counts, k)
		}
		sort.Slice(counts, func(i, j int) bool {
			return len(counts[i]) < len(counts[j]) || (len(counts[i]) == len(counts[j]) && counts[i] < counts[j])
		})
		procs := map[string]bool{}
		for _, m := range r.MemoryMiB {
			for p := range m {
				procs[p] = true
			}
		}
		pn := make([]string, 0, len(procs))
		for p := range procs {
			pn = append(pn, p)
		}
		sort.Strings(pn)
		fmt.Fprintf(b, "\n| endpoints | %s |\n|---|%s\n", strings.Join(pn, " | "), strings.Repeat("---|", len(pn)))
		for _, k := range counts {
			row := make([]string, len(pn))
			for i, p := range pn {
				row[i] = fmt.Sprintf("%.0f MiB", r.MemoryMiB[k][p])
			}
			fmt.Fprintf(b, "| %s | %s |\n", k, strings.Join(row, " | "))
		}
	}
}

// mainTable is the headline table: throughput, the baselines, the ratios
// and latencies with their goals.
func (r *Results) mainTable(b *strings.Builder) {
	c := r.Config
	fmt.Fprintf(b, "| measure | value | goal | |\n|---|---|---|---|\n")
	fmt.Fprintf(b, "| end-to-end deliveries/s at saturation (hookd) | %.0f | | |\n", r.Saturation)
	fmt.Fprintf(b, "| events/s the generator committed meanwhile | %.0f (offered %.0f) | | |\n", r.GeneratedRate, c.OfferedRate)
	fmt.Fprintf(b, "| B0 plain HTTP loop (256 goroutines), deliveries/s | %s | | |\n", orSkipped(r.B0, "%.0f"))
	fmt.Fprintf(b, "| B1 naive dispatcher (1 record at a time per partition), deliveries/s | %s | | |\n", orSkipped(r.B1, "%.0f"))
	b2 := orSkipped(r.B2, "%.0f")
	if r.B2Note != "" {
		b2 += " (" + r.B2Note + ")"
	}
	fmt.Fprintf(b, "| B2 River Postgres queue (256 workers), deliveries/s | %s | | |\n", b2)
	h0, ok0 := r.Ratios["hookd/B0"]
	fmt.Fprintf(b, "| hookd / B0 | %s | >= %.2f | %s |\n", orSkipped(h0, "%.2f"), goalHookdOverB0, met(ok0, h0 >= goalHookdOverB0))
	fmt.Fprintf(b, "| hookd / B1 | %s | | |\n", orSkipped(r.Ratios["hookd/B1"], "%.2f"))
	h2, ok2 := r.Ratios["hookd/B2"]
	g2 := goalHookdOverB2
	if r.Postgres == PGFsyncOff {
		g2 = goalHookdOverB2Fsync
	}
	fmt.Fprintf(b, "| hookd / B2 (Postgres %s) | %s | >= %.0f | %s |\n", r.Postgres, orSkipped(h2, "%.2f"), g2, met(ok2, h2 >= g2))
	if r.B0CostUs > 0 {
		fmt.Fprintf(b, "| dispatcher CPU per delivery / B0 cost per delivery (%.0f µs) | %.2f | <= %.1f | %s |\n",
			r.B0CostUs, r.DispatchCostOverB0, goalDispatchCostOverB0, met(true, r.DispatchCostOverB0 <= goalDispatchCostOverB0))
		fmt.Fprintf(b, "| all hookd processes' CPU per delivery / B0 cost per delivery | %.2f | <= %.1f | %s |\n",
			r.HookdCostOverB0, goalHookdCostOverB0, met(true, r.HookdCostOverB0 <= goalHookdCostOverB0))
	}
	if w := r.Writes; w != nil {
		fmt.Fprintf(b, "| Postgres rows written per delivery at saturation: hookd's own (with the generator's outbox rows; temporary-table rows; pg_stat_database's count) | %.2f (%.2f; %.2f; %.2f)%s | <= %.1f | %s |\n",
			w.OwnRowsPerDelivery, w.RowsPerDelivery, w.TempRowsPerDelivery, w.DatabaseRowsPerDelivery, unsettled(w),
			goalRowsPerDelivery, met(true, w.OwnRowsPerDelivery <= goalRowsPerDelivery))
		fmt.Fprintf(b, "| WAL bytes / WAL syncs per delivery at saturation | %.0f / %.3f | | |\n", w.WALBytesPerDelivery, w.SyncsPerDelivery)
		fmt.Fprintf(b, "| delivery log caught up, seconds after the last delivery; deliveries/s counted to that moment | %.1f; %.0f | | |\n", r.AttemptLogCatchUpS, r.LoggedRate)
	}
	if p := r.Latency50; p != nil {
		fmt.Fprintf(b, "| **p99 commit-to-receiver at 50%% of saturation** (%.0f/s) | %.1f ms | <= %.0f ms | %s |\n",
			p.RateS, p.P99, goalP99At50Ms, met(p.N > 0, p.P99 <= goalP99At50Ms))
	}
	for _, l := range []struct {
		name string
		p    *Percentiles
	}{{"50%", r.Latency50}, {"90%", r.Latency90}} {
		if l.p != nil {
			fmt.Fprintf(b, "| commit-to-receiver latency at %s load (%.0f/s): p50 / p99 / p99.9 / max ms | %.1f / %.1f / %.1f / %.1f | | |\n",
				l.name, l.p.RateS, l.p.P50, l.p.P99, l.p.P999, l.p.Max)
			if o, i := l.p.Outbox, l.p.Ingress; o != nil && i != nil && o.N > 0 && i.N > 0 {
				fmt.Fprintf(b, "| the same by origin: outbox (through the relay) p50 / p99; ingress p50 / p99 ms | %.1f / %.1f; %.1f / %.1f | | |\n",
					o.P50, o.P99, i.P50, i.P99)
			}
			if f, a := l.p.First, l.p.After; f != nil && a != nil && f.N > 0 && a.N > 0 {
				fmt.Fprintf(b, "| the same by commit time: the phase's first %s p50 / p99; after it p50 / p99 ms | %.1f / %.1f; %.1f / %.1f | | |\n",
					StartWindow, f.P50, f.P99, a.P50, a.P99)
			}
		}
	}
	r.tenancyRows(b)
	fmt.Fprintf(b, "| lost (committed, never delivered) over every phase | %d | 0 | %s |\n\n", r.Lost, met(true, r.Lost == 0))
}

func (r *Results) tenancyRows(b *strings.Builder) {
	if iso := r.Isolation; iso != nil && iso.Without != nil && iso.With != nil {
		fmt.Fprintf(b, "| isolation, 99 healthy endpoints at %.0f events/s: deliveries/s without / with 1 hanging | %.0f / %.0f (ratio %.3f) | >= 0.95 | %s |\n",
			iso.Rate, iso.Without.RateS, iso.With.RateS, iso.ThroughputRatio, met(true, iso.ThroughputRatio >= 0.95))
		fmt.Fprintf(b, "| isolation: healthy p99 ms without / with 1 hanging | %.1f / %.1f (ratio %.3f) | >= 0.95 | %s |\n",
			iso.Without.P99, iso.With.P99, iso.P99Ratio, met(true, iso.P99Ratio >= 0.95))
	}
	if ten := r.Tenancy; ten != nil && ten.Without != nil && ten.With != nil {
		fmt.Fprintf(b, "| tenancy, 100 healthy accounts at %.0f events/s: deliveries/s without / with an abusive account (%d hanging endpoints, max_in_flight 100000, %.0f events/s) | %.0f / %.0f (ratio %.3f) | >= 0.95 | %s |\n",
			ten.Rate, ten.AbuseEndpoints, ten.AbuseRate, ten.Without.RateS, ten.With.RateS, ten.ThroughputRatio, met(true, ten.ThroughputRatio >= 0.95))
		fmt.Fprintf(b, "| tenancy: healthy p50 / p99 ms without / with the abusive account | %.1f / %.1f — %.1f / %.1f (p99 ratio %.3f) | >= 0.95 | %s |\n",
			ten.Without.P50, ten.Without.P99, ten.With.P50, ten.With.P99, ten.P99Ratio, met(true, ten.P99Ratio >= 0.95))
		fmt.Fprintf(b, "| tenancy: abusive account's events committed / timeouts / breaker openings / circuit-open attempts / fair-share waits / fair-share deferrals | %d / %.0f / %.0f / %.0f / %.0f / %.0f | | |\n",
			ten.AbusiveCommitted, ten.AbusiveTimeouts, ten.BreakerOpenings, ten.CircuitOpen, ten.FairShareWaits, ten.FairShareDeferred)
	}
}

// settingsTable compares hookd and B2 under each Postgres setting.
func (r *Results) settingsTable(b *strings.Builder) {
	if len(r.PerSetting) == 0 {
		return
	}
	fmt.Fprintf(b, "| Postgres | hookd deliveries/s | B2 River deliveries/s | hookd / B2 | goal | | rows written per delivery: hookd's own (with the outbox) / River | WAL bytes per delivery: hookd / River | WAL syncs per delivery: hookd / River | Postgres CPU µs per delivery: hookd / River | lost |\n")
	fmt.Fprintf(b, "|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, st := range r.PerSetting {
		goal := goalHookdOverB2
		if st.Mode == PGFsyncOff {
			goal = goalHookdOverB2Fsync
		}
		goalText, mark := fmt.Sprintf(">= %.0f", goal), met(st.B2 > 0, st.HookdOverB2 >= goal)
		if st.Mode == PGAsIs {
			goalText, mark = "", ""
		}
		hw, rw := st.Writes, st.B2Writes
		rows := fmt.Sprintf("%s / %s", fmtW(hw, func(w *PGWrites) string {
			return fmt.Sprintf("%.2f (%.2f)%s", w.OwnRowsPerDelivery, w.RowsPerDelivery, unsettled(w))
		}),
			fmtW(rw, func(w *PGWrites) string { return fmt.Sprintf("%.2f", w.RowsPerDelivery) }))
		wal := fmt.Sprintf("%s / %s", fmtW(hw, func(w *PGWrites) string { return fmt.Sprintf("%.0f", w.WALBytesPerDelivery) }),
			fmtW(rw, func(w *PGWrites) string { return fmt.Sprintf("%.0f", w.WALBytesPerDelivery) }))
		syncs := fmt.Sprintf("%s / %s", fmtW(hw, func(w *PGWrites) string { return fmt.Sprintf("%.3f", w.SyncsPerDelivery) }),
			fmtW(rw, func(w *PGWrites) string { return fmt.Sprintf("%.3f", w.SyncsPerDelivery) }))
		cpu := fmt.Sprintf("%s / %s", fmtW(hw, func(w *PGWrites) string { return orSkipped(w.ServerCPUUsPerDelivery, "%.0f") }),
			fmtW(rw, func(w *PGWrites) string { return orSkipped(w.ServerCPUUsPerDelivery, "%.0f") }))
		b2 := orSkipped(st.B2, "%.0f")
		if st.B2Note != "" {
			b2 += " (" + st.B2Note + ")"
		}
		fmt.Fprintf(b, "| %s (%s) | %.0f | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n",
			st.Mode, st.Settings, st.Saturation, b2, orSkipped(st.HookdOverB2, "%.2f"), goalText, mark, rows, wal, syncs, cpu, st.Lost)
	}
	b.WriteString("\n")
}

// cpuByPartyTable splits each setting's CPU per delivery by who spent it:
// the two systems with their Postgres servers, and hookbench (the load it
// generates, the receivers that verify every delivery), which shares the
// cores with both.
func (r *Results) cpuByPartyTable(b *strings.Builder) {
	if !slices.ContainsFunc(r.PerSetting, func(st *SettingRun) bool { return st.CPU != (CPUByParty{}) }) {
		return
	}
	b.WriteString("| Postgres | CPU µs per delivery: hookd processes + Postgres = hookd | River (river-sender) + Postgres = River | River / hookd | hookbench itself while hookd / River runs |\n|---|---|---|---|---|\n")
	for _, st := range r.PerSetting {
		c := st.CPU
		fmt.Fprintf(b, "| %s | %s + %s = %s | %s + %s = %s | %s | %s / %s |\n", st.Mode,
			orSkipped(c.Hookd, "%.0f"), orSkipped(c.HookdPostgres, "%.0f"), orSkipped(c.Hookd+c.HookdPostgres, "%.0f"),
			orSkipped(c.River, "%.0f"), orSkipped(c.RiverPostgres, "%.0f"), orSkipped(c.River+c.RiverPostgres, "%.0f"),
			orSkipped(c.RiverOverHookd, "%.2f"), orSkipped(c.HarnessHookd, "%.0f"), orSkipped(c.HarnessRiver, "%.0f"))
	}
	b.WriteString("\n")
}

// orSkipped formats v, or "-" for a phase not run (zero).
func orSkipped(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func unsettled(w *PGWrites) string {
	if w.Unsettled {
		return " (still moving after 15 s: lower bounds)"
	}
	return ""
}

func fmtW(w *PGWrites, f func(*PGWrites) string) string {
	if w == nil {
		return "-"
	}
	return f(w)
}

// stagesTable is the latency breakdown at 50% of saturation.
func (r *Results) stagesTable(b *strings.Builder) {
	if r.Latency50 == nil {
		return
	}
	fmt.Fprintf(b, "| stage at 50%% of saturation (%.0f/s) | observations | mean ms | p50 ms | p99 ms |\n|---|---|---|---|---|\n", r.Latency50.RateS)
	for _, st := range r.Stages50 {
		fmt.Fprintf(b, "| %s | %.0f | %.1f | %.1f | %.1f |\n", st.Stage, st.N, st.MeanMs, st.P50Ms, st.P99Ms)
	}
	p := r.Latency50
	fmt.Fprintf(b, "| **commit to receiver** (end to end, hookbench's clock) | %d | | %.1f | %.1f |\n\n", p.N, p.P50, p.P99)
}

// procTable is each process's CPU and memory over the saturation phase.
func (r *Results) procTable(b *strings.Builder) {
	names := make([]string, 0, len(r.Procs))
	for n := range r.Procs {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(b, "| process (saturation phase) | CPU s | CPU s per 1000 deliveries | CPU µs per delivery / B0 cost per delivery | peak RSS MiB |\n|---|---|---|---|---|\n")
	for _, n := range names {
		p := r.Procs[n]
		fmt.Fprintf(b, "| %s | %.1f | %.3f | %.2f | %.0f |\n", n, p.CPUSeconds, p.CPUSecondsPer1000, p.CostOverB0, p.PeakRSSMiB)
	}
	if r.B0CostUs > 0 {
		d, all := cpuPerDelivery(r.Procs, r.Delivered)
		fmt.Fprintf(b, "| dispatchers together | | %.3f | %.2f (goal <= %.1f: %s) | |\n", d/1000, r.DispatchCostOverB0, goalDispatchCostOverB0, met(true, r.DispatchCostOverB0 <= goalDispatchCostOverB0))
		fmt.Fprintf(b, "| all hookd processes | | %.3f | %.2f (goal <= %.1f: %s) | |\n", all/1000, r.HookdCostOverB0, goalHookdCostOverB0, met(true, r.HookdCostOverB0 <= goalHookdCostOverB0))
	}
	if w := r.Writes; w != nil && w.ServerCPUUsPerDelivery > 0 {
		pg := ""
		if r.B0CostUs > 0 {
			pg = fmt.Sprintf("%.2f", w.ServerCPUUsPerDelivery/r.B0CostUs)
		}
		fmt.Fprintf(b, "| Postgres server (every backend, the generator's included; not a hookd process) | | %.3f | %s | |\n", w.ServerCPUUsPerDelivery/1000, pg)
		fmt.Fprintf(b, "| of which WAL senders (the relay's logical decoding) | | %.3f | | |\n", w.WALSenderCPUUsPerDelivery/1000)
	}
	b.WriteString("\n")
}

// schemeText names the receivers' scheme for the header (results of
// runs before --scheme have none: they were all http).
func schemeText(s string) string {
	switch s {
	case SchemeHTTPS:
		return "https (a CA of the run, trusted through SSL_CERT_FILE)"
	case "":
		return "http"
	}
	return s
}

// oneHostTable is the one-host phase: connections and TLS handshakes per
// 1,000 deliveries with every endpoint on one receiver.
func (r *Results) oneHostTable(b *strings.Builder) {
	oh := r.OneHost
	if oh == nil {
		return
	}
	https := r.Config.Scheme == SchemeHTTPS
	hs := float64(oh.FullHandshakes + oh.ResumedHandshakes)
	goal, mark := "", ""
	if https && oh.Deliveries > 0 {
		per := hs * 1000 / float64(oh.Deliveries)
		goal, mark = fmt.Sprintf("<= %.0f", goalOneHostHandshakesPer1000), met(true, per <= goalOneHostHandshakesPer1000)
	}
	fmt.Fprintf(b, "| %d endpoints on one host (%.0f events/s, after %.0f s warm-up) | value | goal | |\n|---|---|---|---|\n", oh.Endpoints, oh.Rate, oh.WarmupS)
	fmt.Fprintf(b, "| deliveries (requests) measured | %d (%d) | | |\n", oh.Deliveries, oh.Requests)
	unshaken := ""
	if https {
		unshaken = fmt.Sprintf("; %d without a completed TLS handshake", oh.Unshaken)
	}
	fmt.Fprintf(b, "| connections opened per 1,000 deliveries | %.2f (%d%s) | | |\n", oh.ConnsPer1000, oh.ConnsOpened, unshaken)
	if https {
		fmt.Fprintf(b, "| TLS handshakes per 1,000 deliveries: full + resumed | %.2f + %.2f (%d + %d) | %s | %s |\n",
			oh.FullHandshakesPer1000, oh.ResumedHandshakesPer1000, oh.FullHandshakes, oh.ResumedHandshakes, goal, mark)
	}
	fmt.Fprintf(b, "| warm-up: connections opened / TLS handshakes | %d / %d | | |\n", oh.WarmupConns, oh.WarmupHandshakes)
	fmt.Fprintf(b, "| connections open at most / at the end | %d / %d | | |\n", oh.PeakOpen, oh.OpenAtEnd)
	fmt.Fprintf(b, "| protocol: the phase's TLS handshakes by ALPN protocol (over http: its connections) | %s | | |\n", protocolList(oh.Protocols))
	fmt.Fprintf(b, "| commit-to-receiver p50 / p99 ms; lost | %.1f / %.1f; %d | | |\n\n", oh.P50Ms, oh.P99Ms, oh.Lost)
}

// scaleOutTable compares the saturation phase with more dispatchers.
func (r *Results) scaleOutTable(b *strings.Builder) {
	so := r.ScaleOut
	if so == nil {
		return
	}
	d1, all1 := cpuPerDelivery(r.Procs, r.Delivered)
	fmt.Fprintf(b, "| dispatch processes (saturation) | deliveries/s | dispatchers' CPU µs per delivery | all hookd CPU µs per delivery | lost |\n|---|---|---|---|---|\n")
	fmt.Fprintf(b, "| %d | %.0f | %.0f | %.0f | %d |\n", r.Config.Dispatchers, r.Saturation, d1, all1, r.PerSetting[0].Lost)
	fmt.Fprintf(b, "| %d | %.0f | %.0f | %.0f | %d |\n", so.Dispatchers, so.Saturation, so.DispatchCPUUs, so.HookdCPUUs, so.Lost)
	if r.Saturation > 0 && d1 > 0 {
		fmt.Fprintf(b, "| %d / %d | %.2f | %.2f | %.2f | |\n", so.Dispatchers, r.Config.Dispatchers, so.Saturation/r.Saturation, so.DispatchCPUUs/d1, so.HookdCPUUs/all1)
	}
	b.WriteString("\n")
}

// writesTable breaks the saturation phase's Postgres rows down by table.
func (r *Results) writesTable(b *strings.Builder) {
	w := r.Writes
	if w == nil || len(w.ByTable) == 0 {
		return
	}
	names := make([]string, 0, len(w.ByTable))
	for n := range w.ByTable {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(b, "| table (saturation, per delivery) | inserted | updated | deleted |\n|---|---|---|---|\n")
	for _, n := range names {
		t := w.ByTable[n]
		fmt.Fprintf(b, "| %s | %.3f | %.3f | %.3f |\n", n, t.Inserted, t.Updated, t.Deleted)
	}
	fmt.Fprintf(b, "| WAL records / full-page images per delivery | %.2f / %.3f | | |\n", w.WALRecordsPerDelivery, w.FPIPerDelivery)
}
