package hookbench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookd/hookd/bench/chaos"
	"github.com/hookd/hookd/internal/endpoint"
)

// Tenancy compares healthy accounts with and without an abusive one.
type Tenancy struct {
	Rate            float64      `json:"healthy_events_per_second"`
	AbuseRate       float64      `json:"abusive_events_per_second"`
	AbuseEndpoints  int          `json:"abusive_endpoints"`
	Without         *Percentiles `json:"healthy_without_abusive"`
	With            *Percentiles `json:"healthy_with_abusive"`
	ThroughputRatio float64      `json:"throughput_ratio"`
	P99Ratio        float64      `json:"p99_ratio_without_over_with"`
	// Dispatcher counters at the end of the run with the abusive account.
	FairShareWaits    float64 `json:"fair_share_waits"`
	FairShareDeferred float64 `json:"fair_share_deferred"`
	BreakerOpenings   float64 `json:"breaker_openings"`
	CircuitOpen       float64 `json:"circuit_open_attempts"`
	AbusiveTimeouts   float64 `json:"timed_out_attempts"`
	AbusiveCommitted  int     `json:"abusive_events_committed"`
}

// abusiveAccount owns the abusive endpoints of the tenancy phase.
const abusiveAccount = "acct_abusive"

// tenancy runs 100 healthy accounts (one endpoint each) at IsolationRate
// twice, on fresh stacks: alone, then next to an abusive account (issue 11
// item 3) whose TenancyAbusiveEndpoints endpoints never answer and store
// max_in_flight 100000 and timeout_ms 60000 (written to Postgres as an old
// row would be: the API refuses them now), fed at TenancyAbuseRate
// events/s, each event fanning out to every one of its endpoints.
func (b *bench) tenancy(ctx context.Context) error {
	ten := &Tenancy{Rate: b.cfg.IsolationRate, AbuseRate: b.cfg.TenancyAbuseRate, AbuseEndpoints: b.cfg.TenancyAbusiveEndpoints}
	for _, abusive := range []bool{false, true} {
		name := "tenancy_without"
		if abusive {
			name = "tenancy_with"
		}
		s, err := b.newStack(ctx, stackParams{endpoints: 100, partitions: b.cfg.Partitions})
		if err != nil {
			return err
		}
		if abusive {
			if err := s.addAbusive(ctx, b.cfg.TenancyAbusiveEndpoints); err != nil {
				s.close()
				return err
			}
		}
		b.waitIdle(ctx, s)
		pc, err := b.tenancyRun(ctx, s, name, abusive, ten)
		if err != nil {
			s.close()
			return err
		}
		if abusive {
			ten.With = pc
			b.tenancyCounters(ctx, s, ten)
		} else {
			ten.Without = pc
		}
		b.cfg.Logger.Info("hookbench: tenancy", "abusive", abusive, "healthy_per_s", int(pc.RateS), "p50_ms", pc.P50, "p99_ms", pc.P99)
		s.close()
	}
	if ten.Without.RateS > 0 {
		ten.ThroughputRatio = ten.With.RateS / ten.Without.RateS
	}
	if ten.With.P99 > 0 {
		ten.P99Ratio = ten.Without.P99 / ten.With.P99
	}
	b.res.Tenancy = ten
	return nil
}

// tenancyRun offers the healthy load (and the abusive one alongside) for
// one phase and returns the healthy accounts' latencies.
func (b *bench) tenancyRun(ctx context.Context, s *stack, name string, abusive bool, ten *Tenancy) (*Percentiles, error) {
	abuseDone := make(chan struct{})
	abuse := chaos.NewLedger()
	if abusive {
		actx, cancel := context.WithTimeout(ctx, b.cfg.Phase)
		go func() {
			defer close(abuseDone)
			defer cancel()
			_, err := chaos.RunLoad(actx, chaos.LoadConfig{Pool: s.outbox, Kafka: s.kafka, EventsTopic: "webhooks.events",
				Accounts: []string{abusiveAccount}, Rate: b.cfg.TenancyAbuseRate, BatchSize: 5, OutboxShare: b.cfg.OutboxShare,
				Workers: 4, Prefix: name + "_abuse", PayloadBytes: 200}, abuse)
			if err != nil {
				b.cfg.Logger.Warn("hookbench: abusive load", "error", err)
			}
		}()
	} else {
		close(abuseDone)
	}
	start := time.Now()
	l, ok, lost, err := b.runLoad(ctx, s, name, b.cfg.IsolationRate, b.cfg.Phase, 10, nil)
	<-abuseDone
	if err != nil {
		return nil, err
	}
	ten.AbusiveCommitted, _, _ = abuse.Counts()
	b.res.Lost += lost
	pc, lat, times := healthyLatencies(s, l, ok, start, b.cfg.Phase, nil)
	b.res.Series[name] = series(times, start)
	b.res.cdf[map[bool]string{false: "100 healthy accounts", true: "100 healthy + 1 abusive account"}[abusive]] = lat
	return pc, nil
}

// healthyLatencies returns the commit-to-receiver latencies (ms) and
// delivery times of the committed events of l delivered to endpoints not
// in skip, with the rate of those delivered within phase of start.
func healthyLatencies(s *stack, l *chaos.Ledger, ok map[[2]string]time.Time, start time.Time, phase time.Duration,
	skip map[string]bool) (*Percentiles, []float64, []time.Time) {
	acctEP := map[string]string{}
	for _, e := range s.endpoints {
		acctEP[e.Account] = e.ID
	}
	var lat []float64
	var times []time.Time
	inWindow := 0
	l.Each(func(id string, e chaos.EventInfo) {
		ep := acctEP[e.Account]
		if e.State != chaos.StateCommitted || skip[ep] {
			return
		}
		if t, got := ok[[2]string{ep, id}]; got {
			lat = append(lat, float64(t.Sub(e.At))/1e6)
			times = append(times, t)
			if t.Before(start.Add(phase)) {
				inWindow++
			}
		}
	})
	pc := percentiles(lat)
	pc.RateS = float64(inWindow) / phase.Seconds()
	return pc, lat, times
}

// addAbusive registers n hanging endpoints of abusiveAccount with the
// limits of issue 11's repro, straight into Postgres.
func (s *stack) addAbusive(ctx context.Context, n int) error {
	rows := make([][]any, 0, n)
	for i := range n {
		rc := s.receivers[i%len(s.receivers)]
		id := fmt.Sprintf("ep_abusive_%03d", i)
		secret := endpoint.NewSecret()
		u, err := rc.Add(chaos.EndpointSpec{ID: id, Secret: secret, Behave: chaos.BehaveHang, FailAttempts: -1})
		if err != nil {
			return err
		}
		rows = append(rows, []any{id, abusiveAccount, u, []string{secret}, int32(100_000), int32(60_000)})
	}
	_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"webhooks", "endpoints"},
		[]string{"id", "account", "url", "secrets", "max_in_flight", "timeout_ms"}, pgx.CopyFromRows(rows))
	if err != nil {
		return fmt.Errorf("registering abusive endpoints: %w", err)
	}
	return nil
}

// tenancyCounters reads the dispatchers' fair-share and breaker counters.
func (b *bench) tenancyCounters(ctx context.Context, s *stack, ten *Tenancy) {
	for _, n := range s.cluster.Names() {
		if !strings.HasPrefix(n, "dispatch") {
			continue
		}
		p := s.cluster.Proc(n)
		if p == nil || p.Listen == "" {
			continue
		}
		m, err := scrape(ctx, "http://"+p.Listen+"/metrics")
		if err != nil {
			b.cfg.Logger.Warn("hookbench: scraping a dispatcher", "process", n, "error", err)
			continue
		}
		ten.FairShareWaits += m["hookd_dispatcher_fair_share_waits_total"]
		ten.FairShareDeferred += m["hookd_dispatcher_fair_share_deferred_total"]
		ten.BreakerOpenings += m[`hookd_dispatcher_breaker_transitions_total{state="open"}`]
		for k, v := range m {
			if strings.HasPrefix(k, "hookd_dispatcher_attempts_total{") && strings.Contains(k, `outcome="circuit_open"`) {
				ten.CircuitOpen += v
			}
			if strings.HasPrefix(k, "hookd_dispatcher_attempt_duration_seconds_count{") && strings.Contains(k, `outcome="retry"`) {
				ten.AbusiveTimeouts += v
			}
		}
	}
}

// scrape reads a Prometheus text exposition into series -> value.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, sc.Err()
}
