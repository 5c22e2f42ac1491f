package hookbench

import (
	"context"
	"math"
	"sort"
	"strconv"
	"strings"
)

// stageMetric is the histogram hookd's roles observe their stage into
// (internal/stage).
const stageMetric = "hookd_stage_latency_seconds"

// StageLatency is one pipeline stage's latency over a phase, from the
// bucket counts of hookd_stage_latency_seconds summed over the processes
// (quantiles interpolated inside a bucket, as histogram_quantile does).
type StageLatency struct {
	Stage  string  `json:"stage"`
	N      float64 `json:"n"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P99Ms  float64 `json:"p99_ms"`
}

// stageHist is the cumulative bucket counts (by upper bound) and the sum
// of one stage.
type stageHist struct {
	buckets map[float64]float64
	sum     float64
}

// scrapeStages reads every hookd process's stage histograms and adds them up
// by stage. A process that does not answer is left out.
func (b *bench) scrapeStages(ctx context.Context, s *stack) map[string]*stageHist {
	out := map[string]*stageHist{}
	for _, n := range s.cluster.Names() {
		p := s.cluster.Proc(n)
		if p == nil || p.Listen == "" || p.Exited() {
			continue
		}
		m, err := scrape(ctx, "http://"+p.Listen+"/metrics")
		if err != nil {
			b.cfg.Logger.Warn("hookbench: scraping stage latencies", "process", n, "error", err)
			continue
		}
		addStages(out, m)
	}
	return out
}

// addStages adds the stage series of one scrape to out.
func addStages(out map[string]*stageHist, m map[string]float64) {
	for series, v := range m {
		name, labels := splitSeries(series)
		stage := labels["stage"]
		if stage == "" {
			continue
		}
		h := out[stage]
		if h == nil {
			h = &stageHist{buckets: map[float64]float64{}}
			out[stage] = h
		}
		switch name {
		case stageMetric + "_bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err == nil {
				h.buckets[le] += v
			}
		case stageMetric + "_sum":
			h.sum += v
		}
	}
}

// splitSeries parses `name{a="x",b="y"}` (label values without commas or
// escaped quotes, as hookd's are).
func splitSeries(s string) (string, map[string]string) {
	i := strings.IndexByte(s, '{')
	if i < 0 || !strings.HasSuffix(s, "}") {
		return s, nil
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(s[i+1:len(s)-1], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			labels[k] = strings.Trim(v, `"`)
		}
	}
	return s[:i], labels
}

// stageLatencies returns each stage's figures between two scrapes, in
// pipeline order (unknown stages after, by name).
func stageLatencies(before, after map[string]*stageHist) []StageLatency {
	var out []StageLatency
	for stage, a := range after {
		bh := before[stage]
		var les []float64
		delta := map[float64]float64{}
		for le, v := range a.buckets {
			if bh != nil {
				v -= bh.buckets[le]
			}
			delta[le] = v
			les = append(les, le)
		}
		sort.Float64s(les)
		n := delta[math.Inf(1)]
		if n <= 0 {
			continue
		}
		sum := a.sum
		if bh != nil {
			sum -= bh.sum
		}
		out = append(out, StageLatency{Stage: stage, N: n, MeanMs: sum / n * 1000,
			P50Ms: bucketQuantile(0.5, les, delta) * 1000, P99Ms: bucketQuantile(0.99, les, delta) * 1000})
	}
	order := map[string]int{"relay_receive": 1, "relay_publish": 2, "route": 3, "dispatch_wait": 4, "intent": 5, "http": 6}
	sort.Slice(out, func(i, j int) bool {
		oi, oj := order[out[i].Stage], order[out[j].Stage]
		if oi == 0 {
			oi = 99
		}
		if oj == 0 {
			oj = 99
		}
		return oi < oj || (oi == oj && out[i].Stage < out[j].Stage)
	})
	return out
}

// bucketQuantile is Prometheus's histogram_quantile over cumulative counts
// by sorted upper bounds: linear inside the bucket, the largest finite
// bound when the quantile falls in the +Inf bucket.
func bucketQuantile(q float64, les []float64, cum map[float64]float64) float64 {
	total := cum[math.Inf(1)]
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, le := range les {
		c := cum[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevLE
			}
			if c == prevCount {
				return le
			}
			return prevLE + (le-prevLE)*(rank-prevCount)/(c-prevCount)
		}
		prevLE, prevCount = le, c
	}
	return prevLE
}
