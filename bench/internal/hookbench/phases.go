package hookbench

import (
	"context"
	"fmt"
	"time"

	"github.com/hookd/hookd/bench/chaos"
)

// isolation runs 100 endpoints at a fixed rate twice, on fresh stacks:
// all healthy, then with endpoint 0 hanging (every request times out).
func (b *bench) isolation(ctx context.Context) error {
	rate := b.cfg.IsolationRate
	iso := &Isolation{Rate: rate}
	for _, hanging := range []bool{false, true} {
		p := stackParams{endpoints: 100, partitions: b.cfg.Partitions}
		name := "isolation_without"
		if hanging {
			p.behave = map[int]chaos.Behavior{0: chaos.BehaveHang}
			name = "isolation_with"
		}
		s, err := b.newStack(ctx, p)
		if err != nil {
			return err
		}
		hang := s.endpoints[0].ID
		b.waitIdle(ctx, s)
		start := time.Now()
		l, ok, lost, err := b.runLoad(ctx, s, name, rate, b.cfg.Phase, 10, map[string]bool{hang: true})
		if err != nil {
			s.close()
			return err
		}
		b.res.Lost += lost
		pc, lat, times := healthyLatencies(s, l, ok, start, b.cfg.Phase, map[string]bool{hang: true})
		b.res.Series[name] = series(times, start)
		b.res.cdf[map[bool]string{false: "100 healthy", true: "99 healthy + 1 hanging"}[hanging]] = lat
		if hanging {
			iso.With = pc
		} else {
			iso.Without = pc
		}
		b.cfg.Logger.Info("hookbench: isolation", "hanging", hanging, "healthy_per_s", int(pc.RateS), "p99_ms", pc.P99)
		s.close()
	}
	if iso.Without.RateS > 0 {
		iso.ThroughputRatio = iso.With.RateS / iso.Without.RateS
	}
	if iso.With.P99 > 0 {
		iso.P99Ratio = iso.Without.P99 / iso.With.P99
	}
	b.res.Isolation = iso
	return nil
}

// memory starts a fresh stack with n endpoints, sends events over all of
// them and reads each process's peak resident set.
func (b *bench) memory(ctx context.Context, n int) error {
	b.setPhase("memory with %d endpoints: registering", n)
	s, err := b.newStack(ctx, stackParams{endpoints: n, partitions: b.cfg.Partitions})
	if err != nil {
		return err
	}
	defer s.close()
	events := min(n, 20000)
	_, _, lost, err := b.runLoad(ctx, s, fmt.Sprintf("memory%d", n), 2000, time.Duration(float64(events)/2000*float64(time.Second)), 20, nil)
	if err != nil {
		return err
	}
	b.res.Lost += lost
	m := map[string]float64{}
	for name, st := range b.procStats(s) {
		m[name] = float64(st.HWM) / (1 << 20)
	}
	b.res.MemoryMiB[fmt.Sprint(n)] = m
	b.cfg.Logger.Info("hookbench: memory", "endpoints", n, "peak_rss_mib", m)
	return nil
}
