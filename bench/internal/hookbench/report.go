package hookbench

import (
	"fmt"
	"sort"
	"strings"
)

// Markdown renders the results as the tables of docs/benchmarks.md.
func (r *Results) Markdown() string {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "hookbench run of %s on %s\n\n", r.Started.Format("2006-01-02 15:04 MST"), r.Machine)
	fmt.Fprintf(&b, "%d endpoints on %d receivers (%.0f ms answer, %.0f%% first-attempt 503), %d dispatcher(s), %d partitions, %.0f%% of events through the outbox\n\n",
		c.Endpoints, c.Receivers, c.LatencyMs, c.FailRate*100, c.Dispatchers, c.Partitions, c.OutboxShare*100)
	fmt.Fprintf(&b, "| measure | value | goal |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| end-to-end deliveries/s at saturation (hookd) | %.0f | |\n", r.Saturation)
	fmt.Fprintf(&b, "| events/s the generator committed meanwhile | %.0f (offered %.0f) | |\n", r.GeneratedRate, c.OfferedRate)
	fmt.Fprintf(&b, "| B0 plain HTTP loop (256 goroutines), deliveries/s | %.0f | |\n", r.B0)
	fmt.Fprintf(&b, "| B1 naive dispatcher (1 record at a time per partition), deliveries/s | %.0f | |\n", r.B1)
	b2 := fmt.Sprintf("%.0f", r.B2)
	if r.B2Note != "" {
		b2 += " (" + r.B2Note + ")"
	}
	fmt.Fprintf(&b, "| B2 River Postgres queue (256 workers), deliveries/s | %s | |\n", b2)
	fmt.Fprintf(&b, "| hookd / B0 | %.2f | >= 0.60 |\n", r.Ratios["hookd/B0"])
	fmt.Fprintf(&b, "| hookd / B1 | %.2f | |\n", r.Ratios["hookd/B1"])
	fmt.Fprintf(&b, "| hookd / B2 | %.2f | >= 2 |\n", r.Ratios["hookd/B2"])
	for _, l := range []struct {
		name string
		p    *Percentiles
	}{{"50%", r.Latency50}, {"90%", r.Latency90}} {
		if l.p != nil {
			goal := ""
			if l.name == "50%" {
				goal = "p99 < 250 ms"
			}
			fmt.Fprintf(&b, "| commit-to-receiver latency at %s load (%.0f/s): p50 / p99 / p99.9 / max ms | %.1f / %.1f / %.1f / %.1f | %s |\n",
				l.name, l.p.RateS, l.p.P50, l.p.P99, l.p.P999, l.p.Max, goal)
		}
	}
	if iso := r.Isolation; iso != nil && iso.Without != nil && iso.With != nil {
		fmt.Fprintf(&b, "| isolation, 99 healthy endpoints at %.0f events/s: deliveries/s without / with 1 hanging | %.0f / %.0f (ratio %.3f) | >= 0.95 |\n",
			iso.Rate, iso.Without.RateS, iso.With.RateS, iso.ThroughputRatio)
		fmt.Fprintf(&b, "| isolation: healthy p99 ms without / with 1 hanging | %.1f / %.1f (ratio %.3f) | >= 0.95 |\n",
			iso.Without.P99, iso.With.P99, iso.P99Ratio)
	}
	if ten := r.Tenancy; ten != nil && ten.Without != nil && ten.With != nil {
		fmt.Fprintf(&b, "| tenancy, 100 healthy accounts at %.0f events/s: deliveries/s without / with an abusive account (%d hanging endpoints, max_in_flight 100000, %.0f events/s) | %.0f / %.0f (ratio %.3f) | >= 0.95 |\n",
			ten.Rate, ten.AbuseEndpoints, ten.AbuseRate, ten.Without.RateS, ten.With.RateS, ten.ThroughputRatio)
		fmt.Fprintf(&b, "| tenancy: healthy p50 / p99 ms without / with the abusive account | %.1f / %.1f — %.1f / %.1f (p99 ratio %.3f) | >= 0.95 |\n",
			ten.Without.P50, ten.Without.P99, ten.With.P50, ten.With.P99, ten.P99Ratio)
		fmt.Fprintf(&b, "| tenancy: abusive account's events committed / timeouts / breaker openings / circuit-open attempts / fair-share waits / fair-share deferrals | %d / %.0f / %.0f / %.0f / %.0f / %.0f | |\n",
			ten.AbusiveCommitted, ten.AbusiveTimeouts, ten.BreakerOpenings, ten.CircuitOpen, ten.FairShareWaits, ten.FairShareDeferred)
	}
	fmt.Fprintf(&b, "| lost (committed, never delivered) over every phase | %d | 0 |\n\n", r.Lost)
	names := make([]string, 0, len(r.Procs))
	for n := range r.Procs {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "| process (saturation phase) | CPU s | CPU s per 1000 deliveries | peak RSS MiB |\n|---|---|---|---|\n")
	for _, n := range names {
		p := r.Procs[n]
		fmt.Fprintf(&b, "| %s | %.1f | %.3f | %.0f |\n", n, p.CPUSeconds, p.CPUSecondsPer1000, p.PeakRSSMiB)
	}
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
		fmt.Fprintf(&b, "\n| endpoints | %s |\n|---|%s\n", strings.Join(pn, " | "), strings.Repeat("---|", len(pn)))
		for _, k := range counts {
			row := make([]string, len(pn))
			for i, p := range pn {
				row[i] = fmt.Sprintf("%.0f MiB", r.MemoryMiB[k][p])
			}
			fmt.Fprintf(&b, "| %s | %s |\n", k, strings.Join(row, " | "))
		}
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(&b, "\nNotes:\n- %s\n", strings.Join(r.Notes, "\n- "))
	}
	return b.String()
}
