package stage_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/hookd/hookd/internal/stage"
)

func TestRolesSharingARegistryShareTheHistogram(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := stage.Histogram(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := stage.Histogram(reg)
	if err != nil {
		t.Fatal(err)
	}
	stage.Since(a, stage.Route, time.Now().Add(-time.Second))
	stage.Since(b, stage.Route, time.Now().Add(time.Hour)) // skew: clamped to 0
	stage.Since(b, stage.HTTP, time.Time{})                // no start: ignored
	if n := testutil.CollectAndCount(a, stage.Name); n != 1 {
		t.Fatalf("series: %d, want 1 (route only)", n)
	}
	got, err := testutil.GatherAndCount(reg, stage.Name)
	if err != nil || got != 1 {
		t.Fatalf("gathered %d series (%v), want 1", got, err)
	}
}
