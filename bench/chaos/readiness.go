package chaos

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ReadySample is one change of a process's /readyz answer.
type ReadySample struct {
	At time.Time
	// Status is the HTTP status, or 0 when /readyz did not answer (the
	// process is gone, or the request timed out).
	Status int
	// Body is the answer (the failing checks and their reasons), or the
	// request's error.
	Body string
}

// ReadyWatch polls the /readyz of processes and keeps, per process, the
// changes of its answer.
type ReadyWatch struct {
	mu      sync.Mutex
	samples map[string][]ReadySample
	stop    context.CancelFunc
	done    sync.WaitGroup
}

// WatchReady polls http://<Listen>/readyz of each process every interval
// until Stop. A request is given 5 s: hookd bounds each readiness check
// (2 s by default), so a check waiting on a frozen broker still answers.
func WatchReady(ctx context.Context, procs []*Proc, interval time.Duration) *ReadyWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &ReadyWatch{samples: map[string][]ReadySample{}, stop: cancel}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, p := range procs {
		w.done.Go(func() {
			for {
				s := probe(ctx, client, p.Listen)
				if ctx.Err() != nil {
					return // Stop cut the probe: not an answer of the process
				}
				w.note(p.Name, s)
				if pause(ctx, interval) != nil {
					return
				}
			}
		})
	}
	return w
}

func probe(ctx context.Context, client *http.Client, listen string) ReadySample {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+listen+"/readyz", nil)
	if err != nil {
		return ReadySample{At: time.Now(), Body: err.Error()}
	}
	resp, err := client.Do(req)
	if err != nil {
		return ReadySample{At: time.Now(), Body: err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return ReadySample{At: time.Now(), Status: resp.StatusCode, Body: strings.TrimSpace(string(b))}
}

// note keeps s if its status differs from the last one of name.
func (w *ReadyWatch) note(name string, s ReadySample) {
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.samples[name]
	if n := len(prev); n > 0 && prev[n-1].Status == s.Status {
		return
	}
	w.samples[name] = append(prev, s)
}

// Stop ends the polling and waits for it.
func (w *ReadyWatch) Stop() {
	w.stop()
	w.done.Wait()
}

// Samples returns the changes of name's answer, oldest first.
func (w *ReadyWatch) Samples(name string) []ReadySample {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]ReadySample(nil), w.samples[name]...)
}

// RideOut is how one process's readiness followed a fault.
type RideOut struct {
	// Unready is how long after the fault began /readyz first answered
	// 503; negative if it never did during the fault.
	Unready time.Duration
	// Ready is how long after the fault ended /readyz answered 200 again
	// (and kept answering it); negative if it did not.
	Ready time.Duration
}

// RodeOut checks that name's /readyz answered 503 between from and to
// (the fault) and 200 after, and that its last answer is 200.
func (w *ReadyWatch) RodeOut(name string, from, to time.Time) (RideOut, error) {
	ro := RideOut{Unready: -1, Ready: -1}
	ss := w.Samples(name)
	for _, s := range ss {
		if s.Status == http.StatusServiceUnavailable && !s.At.Before(from) && !s.At.After(to) {
			ro.Unready = s.At.Sub(from)
			break
		}
	}
	if n := len(ss); n > 0 && ss[n-1].Status == http.StatusOK && ro.Unready >= 0 {
		ro.Ready = max(ss[n-1].At.Sub(to), 0)
	}
	switch {
	case ro.Unready < 0:
		return ro, fmt.Errorf("%s: /readyz never answered 503 during the fault (%s .. %s): %s", name,
			from.Format("15:04:05.000"), to.Format("15:04:05.000"), FormatSamples(ss, from))
	case ro.Ready < 0:
		return ro, fmt.Errorf("%s: /readyz not back to 200 after the fault: %s", name, FormatSamples(ss, from))
	}
	return ro, nil
}

// FormatSamples renders samples with times relative to origin.
func FormatSamples(ss []ReadySample, origin time.Time) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		body := s.Body
		if len(body) > 160 {
			body = body[:160] + "..."
		}
		parts[i] = fmt.Sprintf("%+.1fs %d %s", s.At.Sub(origin).Seconds(), s.Status, body)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}
