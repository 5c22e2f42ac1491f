package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Stopping the watch while a probe is in flight must not record the probe
// its own cancellation cut as the process's last answer: the broker-fault
// scenarios failed "not back to 200" on a sample "0 ... context canceled"
// taken at Stop.
func TestStopDoesNotRecordTheProbeItCut(t *testing.T) {
	var calls atomic.Int32
	inFlight := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) > 1 {
			select {
			case inFlight <- struct{}{}:
			default:
			}
			select { // the second probe hangs until Stop cuts it
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	defer close(release)

	w := WatchReady(context.Background(), []*Proc{{Name: "p", Listen: strings.TrimPrefix(srv.URL, "http://")}}, time.Millisecond)
	select {
	case <-inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("the second probe never arrived")
	}
	w.Stop()
	ss := w.Samples("p")
	if len(ss) != 1 || ss[0].Status != http.StatusOK {
		t.Fatalf("samples %s, want one 200", FormatSamples(ss, time.Now()))
	}
}
