package dispatcher_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/dispatcher/signature"
	"github.com/hookd/hookd/internal/delivery"
)

// BenchmarkDispatchVsPlain delivers b.N webhooks through the dispatcher
// (kfake in process, one group member, 64 endpoints on one local receiver,
// 64 requests in flight) and, in the same run, posts the same signed bodies
// to the same receiver with a plain net/http loop of 64 goroutines. It
// reports both rates and their ratio (hookd/plain). Run it with
//
//	go test ./dispatcher -run '^$' -bench DispatchVsPlain -benchtime 20000x
func BenchmarkDispatchVsPlain(b *testing.B) {
	const endpoints, workers = 64, 64
	bd := setup(b, setupOpts{partitions: 12})
	var mu sync.Mutex
	got := 0
	done := make(chan struct{})
	target := 0
	srv := newReceiver(b, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got++
		if got == target {
			close(done)
		}
		mu.Unlock()
	})
	reset := func(n int) {
		mu.Lock()
		got, target, done = 0, n, make(chan struct{})
		mu.Unlock()
	}
	for i := range endpoints {
		bd.eps.set(dispatcher.Target{ID: fmt.Sprintf("ep_%d", i), URL: fmt.Sprintf("%s/ep/%d", srv.srv.URL, i)})
	}
	n := b.N
	ds := make([]*delivery.Delivery, n)
	for i := range ds {
		ds[i] = newDelivery(fmt.Sprintf("evt_%d", i), fmt.Sprintf("ep_%d", i%endpoints))
	}

	// Plain loop: same bodies, same headers, signed, same receiver.
	keys, _ := signature.ParseSecrets([]string{secretA})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, Proxy: nil}}
	reset(n)
	b.ResetTimer()
	start := time.Now()
	work := make(chan *delivery.Delivery)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				now := time.Now()
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.srv.URL+"/ep/"+d.EndpointID, bytes.NewReader(d.Body))
				req.Header.Set("webhook-id", d.EventID)
				req.Header.Set("webhook-timestamp", signature.Timestamp(now))
				req.Header.Set("webhook-signature", signature.Sign(d.EventID, now, d.Body, keys))
				req.Header.Set("content-type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	for _, d := range ds {
		work <- d
	}
	close(work)
	wg.Wait()
	plain := time.Since(start)
	client.CloseIdleConnections()

	// Dispatcher: warm up (group joined, connections open), then time the
	// produce of n deliveries until the receiver has answered them all.
	b.StopTimer()
	bd.start(dispatcher.Config{AllowPrivateNetworks: true, Concurrency: workers, EndpointBacklog: max(n, 1000)}, runOpts{})
	reset(1)
	bd.produce(-1, newDelivery("evt_warmup", "ep_0"))
	<-done
	reset(n)
	b.StartTimer()
	start = time.Now()
	bd.produce(-1, ds...)
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("dispatcher did not deliver in 5 minutes")
	}
	hookd := time.Since(start)
	b.StopTimer()

	plainRate := float64(n) / plain.Seconds()
	hookdRate := float64(n) / hookd.Seconds()
	b.ReportMetric(plainRate, "plain_deliveries/s")
	b.ReportMetric(hookdRate, "hookd_deliveries/s")
	b.ReportMetric(hookdRate/plainRate, "hookd/plain")
	b.ReportMetric(0, "ns/op")
}
