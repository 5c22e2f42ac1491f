package hookbench

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/pgtest"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/internal/wait"
)

func TestBucketQuantile(t *testing.T) {
	t.Parallel()
	les := []float64{0.01, 0.1, 1, math.Inf(1)}
	cum := map[float64]float64{0.01: 50, 0.1: 90, 1: 100, math.Inf(1): 100}
	for _, tc := range []struct {
		q, want float64
	}{
		{0.5, 0.01},   // exactly the first bucket's count
		{0.25, 0.005}, // halfway through the first bucket
		{0.7, 0.055},  // halfway through the second
		{0.99, 0.91},  // 9 of 10 through the third
	} {
		if got := bucketQuantile(tc.q, les, cum); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("bucketQuantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	// A quantile in the +Inf bucket is the largest finite bound.
	cum = map[float64]float64{0.01: 10, 0.1: 10, 1: 10, math.Inf(1): 100}
	if got := bucketQuantile(0.99, les, cum); got != 1 {
		t.Errorf("bucketQuantile in +Inf = %v, want 1", got)
	}
}

func TestStageLatenciesSubtractsAndSumsProcesses(t *testing.T) {
	t.Parallel()
	scrapeOf := func(n float64) map[string]float64 {
		return map[string]float64{
			`hookd_stage_latency_seconds_bucket{stage="http",le="0.01"}`:  n,
			`hookd_stage_latency_seconds_bucket{stage="http",le="0.1"}`:   n,
			`hookd_stage_latency_seconds_bucket{stage="http",le="+Inf"}`:  n,
			`hookd_stage_latency_seconds_sum{stage="http"}`:               n * 0.005,
			`hookd_stage_latency_seconds_count{stage="http"}`:             n,
			`hookd_stage_latency_seconds_bucket{stage="route",le="0.01"}`: 0,
			`hookd_stage_latency_seconds_bucket{stage="route",le="0.1"}`:  n,
			`hookd_stage_latency_seconds_bucket{stage="route",le="+Inf"}`: n,
			`hookd_stage_latency_seconds_sum{stage="route"}`:              n * 0.05,
			`other_metric{stage="http"}`:                                  1e9,
		}
	}
	before, after := map[string]*stageHist{}, map[string]*stageHist{}
	addStages(before, scrapeOf(100))
	// Two processes (say two dispatchers) after the phase.
	addStages(after, scrapeOf(150))
	addStages(after, scrapeOf(150))
	got := stageLatencies(before, after)
	if len(got) != 2 || got[0].Stage != "route" || got[1].Stage != "http" {
		t.Fatalf("stages = %+v, want route then http", got)
	}
	http := got[1]
	if http.N != 200 || math.Abs(http.MeanMs-5) > 1e-9 || http.P99Ms > 10 {
		t.Errorf("http = %+v, want 200 observations, mean 5 ms, p99 <= 10 ms", http)
	}
	if r := got[0]; r.P50Ms <= 10 || r.P50Ms > 100 {
		t.Errorf("route p50 = %v ms, want inside (10, 100]", r.P50Ms)
	}
}

func TestWritesBetweenLeavesOutTheOutbox(t *testing.T) {
	t.Parallel()
	before := pgSnapshot{rows: 1000, lsn: 0, sync: 5, tables: map[string][3]int64{
		"webhooks.outbox": {10, 0, 0}, "webhooks.deliveries": {10, 10, 0}}}
	after := pgSnapshot{rows: 1000 + 350, lsn: 100_000, sync: 15, tables: map[string][3]int64{
		"webhooks.outbox": {60, 0, 0}, "webhooks.deliveries": {110, 210, 0}, "webhooks.untouched": {0, 0, 0},
		"pg_temp_3.staging": {100, 0, 0}}}
	w := writesBetween(before, after, 100, "webhooks.outbox")
	if w.DatabaseRowsPerDelivery != 3.5 || w.RowsPerDelivery != 3.5 || w.OwnRowsPerDelivery != 3.0 || w.TempRowsPerDelivery != 1 {
		t.Errorf("rows per delivery = %v (database %v), own %v, temp %v; want 3.5 (3.5), 3.0, 1",
			w.RowsPerDelivery, w.DatabaseRowsPerDelivery, w.OwnRowsPerDelivery, w.TempRowsPerDelivery)
	}
	if w.WALBytesPerDelivery != 1000 || w.SyncsPerDelivery != 0.1 {
		t.Errorf("WAL bytes %v, syncs %v per delivery; want 1000 and 0.1", w.WALBytesPerDelivery, w.SyncsPerDelivery)
	}
	if _, ok := w.ByTable["webhooks.untouched"]; ok || w.ByTable["webhooks.deliveries"] != (TableWrites{Inserted: 1, Updated: 2}) {
		t.Errorf("by table = %+v", w.ByTable)
	}
}

func TestParsePostgresModes(t *testing.T) {
	t.Parallel()
	if m, err := ParsePostgresModes(" fsync-off, durable "); err != nil || len(m) != 2 || m[0] != PGFsyncOff {
		t.Errorf("ParsePostgresModes = %v, %v", m, err)
	}
	for _, bad := range []string{"", "durable,durable", "fast"} {
		if _, err := ParsePostgresModes(bad); err == nil {
			t.Errorf("ParsePostgresModes(%q) = nil error", bad)
		}
	}
}

// TestPostgresModesSwitchAndRestore runs against the test server
// (scripts/test.sh): the modes take effect in new sessions and the
// server's own settings come back.
func TestPostgresModesSwitchAndRestore(t *testing.T) {
	base := pgtest.BaseURL()
	if base == "" && os.Getenv("PGHOST") == "" {
		t.Skip("no Postgres: run through scripts/test.sh")
	}
	ctx := context.Background()
	origFsync := showSetting(t, base, "fsync")
	pg := &pgSettings{base: base}
	if got, err := pg.use(ctx, PGAsIs); err != nil || !strings.HasPrefix(got, "fsync="+origFsync+",") || pg.changed {
		t.Fatalf("use(as-is) = %q, %v (changed %v); want the server's fsync=%s untouched", got, err, pg.changed, origFsync)
	}
	for _, tc := range []struct{ mode, want string }{
		{PGDurable, "fsync=on, synchronous_commit=on"},
		{PGFsyncOff, "fsync=off, synchronous_commit=on"},
	} {
		got, err := pg.use(ctx, tc.mode)
		if err != nil || got != tc.want {
			t.Fatalf("use(%s) = %q, %v; want %q", tc.mode, got, err, tc.want)
		}
		if f := showSetting(t, base, "fsync"); !strings.HasPrefix(tc.want, "fsync="+f+",") {
			t.Fatalf("a new session sees fsync=%s under %s", f, tc.mode)
		}
	}
	// End on the mode the server was not in, so that restore has
	// something to undo.
	last := map[string]string{"on": PGFsyncOff, "off": PGDurable}[origFsync]
	if _, err := pg.use(ctx, last); err != nil {
		t.Fatal(err)
	}
	pg.restore()
	// The postmaster reloads asynchronously after pg_reload_conf.
	wait.For(t, 10*time.Second, "fsync back to the server's "+origFsync, func() bool {
		return showSetting(t, base, "fsync") == origFsync
	})
}

func showSetting(t *testing.T, base, name string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPGStatsCountsRowsWritten(t *testing.T) {
	base := pgtest.BaseURL()
	if base == "" && os.Getenv("PGHOST") == "" {
		t.Skip("no Postgres: run through scripts/test.sh")
	}
	ctx := context.Background()
	dbURL, drop, err := createDatabase(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer drop()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (id int)"); err != nil {
		t.Fatal(err)
	}
	before, err := pgStats(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO t SELECT generate_series(1, 300); UPDATE t SET id = id + 1 WHERE id <= 100"); err != nil {
		t.Fatal(err)
	}
	after, err := pgStats(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	w := writesBetween(before, after, 100, "")
	if w.ByTable["public.t"] != (TableWrites{Inserted: 3, Updated: 1}) || w.RowsPerDelivery < 4 || w.WALBytesPerDelivery <= 0 {
		t.Fatalf("writes = %+v", w)
	}
}

func TestMarkdownMarksGoals(t *testing.T) {
	t.Parallel()
	r := &Results{Postgres: PGDurable, PostgresSettings: "fsync=on, synchronous_commit=on", Saturation: 4000, B0: 8000, B2: 2500,
		Delivered: 1000, Ratios: map[string]float64{"hookd/B0": 0.5, "hookd/B2": 1.6},
		Procs: map[string]*ProcResult{"dispatch-0": {CPUSeconds: 0.05}, "router": {CPUSeconds: 0.02}},
		Latency50: &Percentiles{N: 10, P99: 80, RateS: 2000,
			First: &Percentiles{N: 3, P50: 20, P99: 79}, After: &Percentiles{N: 7, P50: 10, P99: 30}},
		Writes: &PGWrites{OwnRowsPerDelivery: 2, ByTable: map[string]TableWrites{}}}
	r.PerSetting = []*SettingRun{{Mode: PGDurable, Saturation: 4000, B2: 2500}, {Mode: PGFsyncOff, Saturation: 4000, B2: 3000}}
	(&bench{res: r, cfg: &Config{}}).ratios()
	md := r.Markdown()
	for _, want := range []string{
		"| hookd / B2 (Postgres durable) | 1.60 | >= 2 | **not met** |",
		"| **p99 commit-to-receiver at 50% of saturation** (2000/s) | 80.0 ms | <= 100 ms | met |",
		"| 2.00 (0.00; 0.00; 0.00) | <= 1.5 | **not met** |",
		"| fsync-off () | 4000 | 3000 | 1.33 | >= 1 | met |",
		"| B1 naive dispatcher (1 record at a time per partition), deliveries/s | - |",
		"| the same by commit time: the phase's first 5s p50 / p99; after it p50 / p99 ms | 20.0 / 79.0; 10.0 / 30.0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	// On 2 cores: 2 / 8000/s = 250 µs; the dispatcher's 50 µs is 0.2 of it.
	if math.Abs(r.DispatchCostOverB0-0.4/float64(numCPU())) > 1e-9 {
		t.Errorf("dispatcher cost over B0 = %v", r.DispatchCostOverB0)
	}
}

// Each setting's CPU per delivery is split by who spent it, and River's
// system (its process and Postgres) is compared with hookd's.
func TestCPUByPartyComparesTheSystems(t *testing.T) {
	t.Parallel()
	st := &SettingRun{Mode: PGDurable}
	st.setSaturationCPU(&satRun{hookdCPUUs: 60, harnessCPUUs: 45, writes: &PGWrites{ServerCPUUsPerDelivery: 50}})
	st.CPU.River, st.CPU.RiverPostgres, st.CPU.HarnessRiver = 130, 90, 40
	st.CPU.ratio()
	if math.Abs(st.CPU.RiverOverHookd-2) > 1e-9 {
		t.Fatalf("River over hookd = %v, want (130+90)/(60+50) = 2", st.CPU.RiverOverHookd)
	}
	// Without hookd's Postgres share there is no ratio (not River over
	// hookd's processes alone).
	partial := CPUByParty{Hookd: 55, River: 130, RiverPostgres: 90}
	partial.ratio()
	if partial.RiverOverHookd != 0 {
		t.Errorf("River over hookd without hookd's Postgres = %v, want 0 (not measured)", partial.RiverOverHookd)
	}
	r := &Results{PerSetting: []*SettingRun{{Mode: PGAsIs}, st, {Mode: PGFsyncOff, CPU: partial}}}
	md := r.Markdown()
	for _, want := range []string{
		"| durable | 60 + 50 = 110 | 130 + 90 = 220 | 2.00 | 45 / 40 |",
		"| fsync-off | 55 + - = 55 | 130 + 90 = 220 | - | - / - |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
