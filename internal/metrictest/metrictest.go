// Package metrictest reads one series from a Prometheus registry, for
// tests: the one helper hookd's tests share to check a counter, a gauge or
// a histogram's count.
//
// Internal: only hookd's own packages can import it.
package metrictest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value returns the value of the counter or gauge name whose label values
// are labels, in the order the metric declares its labels, or the sample
// count of such a histogram; an absent series reads as 0.
func Value(t testing.TB, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(labels) != len(m.GetLabel()) {
				continue
			}
			match := true
			for i, l := range m.GetLabel() {
				match = match && l.GetValue() == labels[i]
			}
			if match {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}
