package replay

import (
	"context"
	"time"
)

// pacer spaces records to a rate without a ticker goroutine.
type pacer struct {
	rate  float64
	start time.Time
	n     int64
}

func (p *pacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	p.n++
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
