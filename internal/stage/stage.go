// Package stage measures how long deliveries spend in each stage of the
// pipeline, so that a p99 commit-to-receiver latency can be explained stage
// by stage. Every role of a process observes into one histogram,
// hookd_stage_latency_seconds, labelled by stage.
//
// Internal: only hookd's own packages can import it.
package stage

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The stages, in pipeline order. Each is observed once per event or
// delivery, by the role named.
const (
	// RelayPublish is outbox commit to the event record acknowledged by
	// Kafka (relay; the commit time is the transaction's commit timestamp).
	RelayPublish = "relay_publish"
	// RelayReceive is the part of RelayPublish before the relay has the
	// row: outbox commit to the row read from Postgres's replication
	// stream (relay). It is Postgres's share: the commit's fsync, taken
	// after its timestamp, and the WAL sender decoding all WAL in order
	// (checkpoints and autovacuum after a burst show here). The rest of
	// RelayPublish is the relay's and Kafka's.
	RelayReceive = "relay_receive"
	// Route is the event record's timestamp to its delivery records
	// acknowledged by Kafka (router).
	Route = "route"
	// DispatchWait is the delivery record's timestamp to the start of its
	// first HTTP attempt (dispatcher): fetch, queueing behind the endpoint's
	// cap, rate and breaker, and waiting for a slot of --concurrency.
	DispatchWait = "dispatch_wait"
	// HTTP is the first attempt's request, from start to response (dispatcher).
	HTTP = "http"
	// Intent is the part of HTTP before the request goes on the wire: its
	// intent record produced and acknowledged by Kafka (dispatcher), so
	// that no request is sent without a trace.
	Intent = "intent"
)

// Name is the histogram's metric name.
const Name = "hookd_stage_latency_seconds"

// Buckets are the histogram's upper bounds in seconds.
var Buckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Histogram returns the stage histogram registered on reg. Roles sharing a
// registry share the histogram; a nil reg returns an unregistered one.
func Histogram(reg prometheus.Registerer) (*prometheus.HistogramVec, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: Name,
		Help:    "Time a delivery spends in each pipeline stage, by stage: relay_receive (a part of relay_publish), relay_publish, route, dispatch_wait, http (first attempts), intent (a part of http).",
		Buckets: Buckets}, []string{"stage"})
	if reg == nil {
		return h, nil
	}
	if err := reg.Register(h); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.HistogramVec); ok {
				return existing, nil
			}
		}
		return nil, err
	}
	return h, nil
}

// Since observes the time from start to now into stage, ignoring a zero
// start and clamping clock skew between machines to 0.
func Since(h *prometheus.HistogramVec, stage string, start time.Time) {
	if h == nil || start.IsZero() {
		return
	}
	d := time.Since(start)
	if d < 0 {
		d = 0
	}
	h.WithLabelValues(stage).Observe(d.Seconds())
}
