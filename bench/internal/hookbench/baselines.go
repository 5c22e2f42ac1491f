package hookbench

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookd/hookd/internal/pgcpu"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/dispatcher/signature"
	"github.com/hookd/hookd/internal/delivery"
)

// newHTTPClient is B0's and B1's client: net/http's default transport
// (HTTP/2 where the receiver offers it over TLS) trusting the run's CA.
func (b *bench) newHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.MaxIdleConns = 1024
	if b.tls != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: b.tls.Pool, MinVersion: tls.VersionTLS12,
			ClientSessionCache: tls.NewLRUClientSessionCache(0)}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// post sends one signed webhook the way hookd does and reports a 2xx.
func post(ctx context.Context, cl *http.Client, e *endpointInfo, id string, body []byte) bool {
	keys, err := signature.ParseSecrets([]string{e.Secret})
	if err != nil {
		return false
	}
	now := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("user-agent", "hookbench")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", signature.Timestamp(now))
	req.Header.Set("webhook-signature", signature.Sign(id, now, body, keys))
	resp, err := cl.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

func benchBody(id string) []byte {
	b, _ := delivery.Body(id, "invoice.paid", time.Now(), json.RawMessage(fmt.Sprintf(`{"id":%q,"pad":%q}`, id, strings.Repeat("p", 200))))
	return b
}

// b0 is the ceiling: a plain loop of 256 goroutines (hookd's default
// dispatcher concurrency) posting signed bodies to the same endpoints.
func (b *bench) b0(ctx context.Context, s *stack) error {
	b.setPhase("B0: plain HTTP loop")
	s.resetReceivers()
	cl := b.newHTTPClient()
	d := b.cfg.Phase
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var n atomic.Int64
	var seq atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 256 {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := seq.Add(1)
				e := &s.endpoints[int(i)%len(s.endpoints)]
				id := fmt.Sprintf("b0_%d", i)
				if post(ctx, cl, e, id, benchBody(id)) {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.res.B0 = float64(n.Load()) / time.Since(start).Seconds()
	b.cfg.Logger.Info("hookbench: B0", "deliveries_per_s", int(b.res.B0))
	s.resetReceivers()
	return nil
}

// b1 is a naive dispatcher: the deliveries topic hookd's router wrote in
// the phases before, one consumer per partition taking one record at a
// time (sign, POST, wait for the answer, next), no per-endpoint
// scheduling, no concurrency inside a partition.
func (b *bench) b1(ctx context.Context, s *stack) error {
	b.setPhase("B1: naive dispatcher")
	s.resetReceivers()
	cl := b.newHTTPClient()
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Phase)
	defer cancel()
	var wg sync.WaitGroup
	var n atomic.Int64
	start := time.Now()
	for p := range int32(b.cfg.Partitions) {
		kc, err := kgo.NewClient(kgo.SeedBrokers(s.cluster.KafkaAddr), kgo.MaxConcurrentFetches(1),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"webhooks.deliveries": {p: kgo.NewOffset().AtStart()}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted())) // the router writes deliveries in transactions
		if err != nil {
			return err
		}
		wg.Go(func() {
			defer kc.Close()
			for ctx.Err() == nil {
				for _, r := range kc.PollRecords(ctx, 1).Records() {
					d, err := delivery.Decode(r)
					if err != nil {
						continue
					}
					if e := s.byID[d.EndpointID]; e != nil && post(ctx, cl, e, "b1_"+d.EventID, d.Body) {
						n.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	b.res.B1 = float64(n.Load()) / time.Since(start).Seconds()
	b.cfg.Logger.Info("hookbench: B1", "deliveries_per_s", int(b.res.B1))
	s.resetReceivers()
	return nil
}

// b2Run is what B2 measured.
type b2Run struct {
	rate   float64
	writes *PGWrites // nil if Postgres's counters were not read
	note   string    // set when the receivers did not see every delivery
	// senderCPUUs and harnessCPUUs are river-sender's and hookbench's own
	// CPU µs per delivery.
	senderCPUUs, harnessCPUUs float64
}

// b2 runs bench/river's river-sender: jobs inserted in batches into a
// River queue in a database of its own, worked by 256 workers.
func (b *bench) b2(ctx context.Context, s *stack) (b2Run, error) {
	b.setPhase("B2: River (Postgres queue)")
	s.resetReceivers()
	defer s.resetReceivers()
	n := b.cfg.RiverJobs
	f, err := writeRiverJobs(s, n)
	if err != nil {
		return b2Run{}, err
	}
	defer os.Remove(f)
	dbURL, drop, err := createDatabase(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return b2Run{}, err
	}
	defer drop()
	pgBefore, pgErr := pgStats(ctx, dbURL)
	cpuBefore, selfBefore := b.pgCPU.Read(), selfCPU()
	cmd := exec.CommandContext(ctx, b.riverBin, "--database-url", dbURL, "--deliveries", f, "--workers", "256",
		"--insert-batch", strconv.Itoa(b.cfg.InsertBatch), "--timeout", "5m")
	if b.tls != nil {
		// river-sender's net/http client trusts the CA the way hookd does.
		cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+b.tls.CAFile)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	cpuAfter, selfAfter := b.pgCPU.Read(), selfCPU()
	if err != nil {
		return b2Run{}, fmt.Errorf("river-sender: %v: %s", err, stderr.String())
	}
	var res struct {
		PerSecond  float64 `json:"deliveries_per_second"`
		Completed  int     `json:"completed"`
		CPUSeconds float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return b2Run{}, fmt.Errorf("river-sender output %q: %w", out, err)
	}
	run := b2Run{rate: res.PerSecond, harnessCPUUs: perDeliveryUs(selfAfter-selfBefore, res.Completed),
		senderCPUUs: perDeliveryUs(time.Duration(res.CPUSeconds*float64(time.Second)), res.Completed)}
	if pgErr == nil {
		if pgAfter, err := pgStats(ctx, dbURL); err == nil {
			run.writes = writesBetween(pgBefore, pgAfter, res.Completed, "")
			run.writes.ServerCPUUsPerDelivery, run.writes.WALSenderCPUUsPerDelivery = pgcpu.PerDelivery(cpuBefore, cpuAfter, res.Completed)
		}
	}
	if got := len(s.firstOK()); got < n {
		run.note = fmt.Sprintf("receivers got %d of %d River deliveries", got, n)
	}
	b.cfg.Logger.Info("hookbench: B2", "deliveries_per_s", int(res.PerSecond), "jobs", n)
	return run, nil
}

// writeRiverJobs writes n River jobs over the endpoints of s to a
// temporary file and returns its name.
func writeRiverJobs(s *stack, n int) (string, error) {
	type job struct {
		URL    string `json:"url"`
		Secret string `json:"secret"`
		ID     string `json:"id"`
		Body   string `json:"body"`
	}
	jobs := make([]job, n)
	for i := range jobs {
		e := &s.endpoints[i%len(s.endpoints)]
		id := fmt.Sprintf("b2_%d", i)
		jobs[i] = job{URL: e.URL, Secret: e.Secret, ID: id, Body: string(benchBody(id))}
	}
	raw, _ := json.Marshal(jobs)
	f := filepath.Join(os.TempDir(), fmt.Sprintf("hookbench-b2-%d.json", time.Now().UnixNano()))
	return f, os.WriteFile(f, raw, 0o600)
}

func numCPU() int { return runtime.NumCPU() }

func splitLines(s string) []string { return strings.Split(s, "\n") }

func indexByte(s string, c byte) int { return strings.IndexByte(s, c) }
