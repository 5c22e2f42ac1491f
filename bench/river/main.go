// Command river-sender is benchmark baseline B2 of bench/hookbench: a webhook
// sender built the way many teams would build one, on a Postgres job queue
// (River: one job per delivery, workers take jobs with FOR UPDATE SKIP
// LOCKED). It lives in its own module so that River never enters hookd's
// go.mod. It reads the deliveries to make from a JSON file, inserts one job
// each (in batches, while the workers already run), POSTs the signed body
// (Standard Webhooks) and prints one JSON line with what it measured. Its
// HTTP client is net/http's default transport (HTTP/2 where the receiver
// offers it over TLS); it trusts https receivers through the system roots,
// which hookbench points at its run's CA with SSL_CERT_FILE.
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Delivery is one webhook to send.
type Delivery struct {
	URL    string `json:"url"`
	Secret string `json:"secret"` // whsec_<base64>
	ID     string `json:"id"`
	Body   string `json:"body"`
}

// WebhookArgs is the River job: one delivery.
type WebhookArgs struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
	ID     string `json:"id"`
	Body   string `json:"body"`
}

// Kind implements river.JobArgs.
func (WebhookArgs) Kind() string { return "webhook" }

// WebhookWorker POSTs one signed webhook.
type WebhookWorker struct {
	river.WorkerDefaults[WebhookArgs]
	client *http.Client
	done   *atomic.Int64
}

// Work implements river.Worker.
func (w *WebhookWorker) Work(ctx context.Context, job *river.Job[WebhookArgs]) error {
	a := job.Args
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(a.Secret, "whsec_"))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(a.ID + "." + ts + "." + a.Body))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.URL, bytes.NewReader([]byte(a.Body)))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("webhook-id", a.ID)
	req.Header.Set("webhook-timestamp", ts)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil)))
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	w.done.Add(1)
	return nil
}

// Result is what river-sender prints.
type Result struct {
	Jobs          int     `json:"jobs"`
	Workers       int     `json:"workers"`
	InsertSeconds float64 `json:"insert_seconds"`
	Seconds       float64 `json:"seconds"`
	PerSecond     float64 `json:"deliveries_per_second"`
	Completed     int64   `json:"completed"`
	// CPUSeconds is this process's CPU from the client's start to the last
	// job done: the inserts, the workers and their HTTP client (not
	// reading the file or migrating).
	CPUSeconds float64 `json:"cpu_seconds"`
}

func main() {
	dbURL := flag.String("database-url", os.Getenv("DATABASE_URL"), "Postgres URL (a database of its own)")
	file := flag.String("deliveries", "", "JSON file: array of {url, secret, id, body}")
	workers := flag.Int("workers", 256, "River MaxWorkers")
	batch := flag.Int("insert-batch", 1000, "jobs per InsertManyFast call (one transaction)")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	if *batch < 1 {
		fmt.Fprintln(os.Stderr, "river-sender: --insert-batch must be at least 1")
		os.Exit(2)
	}
	if err := run(*dbURL, *file, *workers, *batch, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "river-sender:", err)
		os.Exit(1)
	}
}

func run(dbURL, file string, workers, batch int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var ds []Delivery
	if err := json.Unmarshal(raw, &ds); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	var done atomic.Int64
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	ws := river.NewWorkers()
	river.AddWorker(ws, &WebhookWorker{client: &http.Client{Transport: tr, Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, done: &done})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	start, cpuStart := time.Now(), cpuTime()
	if err := client.Start(ctx); err != nil {
		return err
	}
	var insertDur time.Duration
	insertErr := make(chan error, 1)
	go func() {
		for lo := 0; lo < len(ds); lo += batch {
			hi := min(lo+batch, len(ds))
			params := make([]river.InsertManyParams, 0, hi-lo)
			for _, d := range ds[lo:hi] {
				params = append(params, river.InsertManyParams{Args: WebhookArgs(d)})
			}
			if _, err := client.InsertManyFast(ctx, params); err != nil {
				insertErr <- err
				return
			}
		}
		insertDur = time.Since(start)
		insertErr <- nil
	}()
	if err := <-insertErr; err != nil {
		return fmt.Errorf("inserting jobs: %w", err)
	}
	for done.Load() < int64(len(ds)) {
		if ctx.Err() != nil {
			return errors.New("timed out before every job completed")
		}
		time.Sleep(10 * time.Millisecond) // polling the completion count
	}
	elapsed, cpu := time.Since(start), cpuTime()-cpuStart
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer stopCancel()
	_ = client.Stop(stopCtx)
	return json.NewEncoder(os.Stdout).Encode(Result{Jobs: len(ds), Workers: workers, InsertSeconds: insertDur.Seconds(),
		Seconds: elapsed.Seconds(), PerSecond: float64(len(ds)) / elapsed.Seconds(), Completed: done.Load(),
		CPUSeconds: cpu.Seconds()})
}

// cpuTime is this process's CPU time so far, user and system (0 if it
// cannot be read).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
