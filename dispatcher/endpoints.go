package dispatcher

import "time"

// Target is what the dispatcher needs to know about an endpoint.
type Target struct {
	ID      string
	Account string
	URL     string
	// Secrets sign every request, current first; several during a rotation.
	Secrets []string
	// Disabled endpoints receive nothing: their deliveries are dead-lettered
	// with reason endpoint_disabled.
	Disabled bool
	// MaxInFlight overrides Config.MaxInFlight when positive, capped at
	// Config.MaxEndpointInFlight.
	MaxInFlight int
	// Timeout overrides Config.Timeout when positive and shorter: the
	// operator's Config.Timeout is the ceiling.
	Timeout time.Duration
	// RatePerSec limits how often a request to the endpoint starts: at
	// most one every 1/RatePerSec seconds, so any window of W seconds holds
	// at most floor(W*RatePerSec)+1 starts; no burst is saved up while
	// idle. Records over the rate wait in the endpoint's queue (and past
	// Config.EndpointBacklog go to the first retry tier, as for a slow
	// endpoint); other endpoints are not held up. Zero or negative means
	// unlimited. A change applies to the next start, within a second.
	RatePerSec float64
	// Headers are sent with every request, after hookd's own: a name
	// hookd sets (webhook-*, content-type, user-agent) is never replaced.
	// The API and the store refuse reserved names (endpoint.ReservedHeader).
	Headers map[string]string
	// ClientCert and ClientKey are a PEM client certificate (chain) and
	// key, presented when the receiver asks for one (mutual TLS); empty
	// when none. Connections are pooled per certificate.
	ClientCert, ClientKey string
	// SendTraceparent sends the W3C traceparent header of the attempt's
	// span with every request, when tracing is on.
	SendTraceparent bool
	// FIFO endpoints get one request at a time, in the order their
	// records sit in their partition; a failed attempt is retried in place
	// (not through the retry tiers) with the schedule's delays, and the
	// later records wait (fifo.go).
	FIFO bool
}

// Endpoints resolves endpoint ids, typically from an in-memory index kept
// fresh by LISTEN/NOTIFY. It is called for every record, so it must not do
// I/O. A missing endpoint (deleted) is dead-lettered with reason
// endpoint_deleted.
type Endpoints interface {
	Endpoint(id string) (Target, bool)
}

// StaticEndpoints is a fixed set of endpoints by id, for tests and tools.
type StaticEndpoints map[string]Target

var _ Endpoints = StaticEndpoints(nil)

// Endpoint returns the endpoint with the given id.
func (s StaticEndpoints) Endpoint(id string) (Target, bool) {
	t, ok := s[id]
	return t, ok
}
