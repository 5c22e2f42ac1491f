package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// BenchmarkSendCustomHeaders is the cost of an endpoint's custom headers
// on one request through the sender, against a keep-alive receiver on
// 127.0.0.1: none, 3 and the most (20).
func BenchmarkSendCustomHeaders(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	cfg := Config{AllowPrivateNetworks: true, ConnectTimeout: 5 * time.Second, ResponseReadLimit: 1024, ResponseExcerpt: 100}
	cfg.setDefaults()
	for _, n := range []int{0, 3, 20} {
		b.Run(fmt.Sprintf("headers=%d", n), func(b *testing.B) {
			s := newSender(cfg)
			defer s.closeIdle()
			t := Target{ID: "ep_1", URL: srv.URL, Secrets: []string{sendSecret}}
			if n > 0 {
				t.Headers = map[string]string{}
				for i := range n {
					t.Headers[fmt.Sprintf("X-Custom-%d", i)] = "some value of a header"
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if res := s.send(context.Background(), t, sendDelivery, 5*time.Second); res.err != nil || res.status != 200 {
					b.Fatalf("status %d, %v", res.status, res.err)
				}
			}
		})
	}
}
