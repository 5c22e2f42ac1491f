package dispatcher

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/version"
)

// Config configures a Dispatcher. Zero fields take the documented defaults.
type Config struct {
	// Group is the Kafka consumer group shared by every dispatcher process.
	// Defaults to "hookd-dispatchers".
	Group string
	// Topics names the topics read and written (prefix and retry schedule:
	// one retry topic per tier). Defaults to topics.Config's defaults.
	Topics topics.Config
	// MaxInFlight is the number of requests in flight per endpoint when the
	// endpoint sets none. Defaults to 4.
	MaxInFlight int
	// MaxEndpointInFlight caps the requests in flight of one endpoint,
	// whatever the endpoint's own max_in_flight says: the operator's bound
	// on what an account may set, applied to every record at run time.
	// Must be at least MaxInFlight. Defaults to 64.
	MaxEndpointInFlight int
	// Concurrency is the number of requests in flight in this process, all
	// endpoints together. Each account gets a fair share of it: while N
	// accounts are active (requests in flight or records ready to send, or
	// either within the last AccountLinger), an account starts a request
	// only while it holds fewer than max(ceil(Concurrency/N), 4); an
	// account alone may use all of it. Defaults to 256.
	Concurrency int
	// AccountLinger is how long an account still counts as active for the
	// fair share after its last request ended and its last record left: a
	// tenant sending a steady trickle keeps its share between records, so a
	// noisy one cannot take every slot in the gaps and hold them for a
	// whole Timeout. Defaults to 10s.
	AccountLinger time.Duration
	// PartitionMaxHeld is how many records of one partition may be held
	// (read but not finished) before fetching that partition pauses; it
	// resumes below half. Defaults to 2000.
	PartitionMaxHeld int
	// EndpointBacklog is how many records of one endpoint may wait for an
	// in-flight slot while the endpoint holds its slots (no answer for a
	// second at its in-flight limit, or waiting on its rate); past it,
	// further records go to the first retry tier without spending an
	// attempt (outcome "deferred"). An endpoint that answers is never
	// deferred: its records wait, bounded by PartitionMaxHeld.
	// Defaults to 1000.
	EndpointBacklog int
	// ConnectTimeout bounds the TCP connect and the TLS handshake.
	// Defaults to 3s.
	ConnectTimeout time.Duration
	// Timeout bounds a whole request, response body included: it is the
	// timeout of endpoints that set none and the ceiling of those that set
	// their own (an endpoint may shorten it, never lengthen it).
	// Defaults to 10s.
	Timeout time.Duration
	// ResponseReadLimit is how many bytes of a response body are read; a
	// longer body is not read further and its connection is dropped.
	// Defaults to 64 KiB.
	ResponseReadLimit int64
	// ResponseExcerpt is how many bytes of the response body are kept for
	// the attempt log. Defaults to 1 KiB.
	ResponseExcerpt int
	// IdleConnsPerHost is how many idle keep-alive connections are kept per
	// receiver host. Defaults to Concurrency: a host that takes more of the
	// request slots than an even share (a few receivers behind many
	// endpoints) keeps a connection per slot instead of dialling anew
	// for most of its requests.
	IdleConnsPerHost int
	// Breaker configures the per-endpoint circuit breakers.
	Breaker BreakerConfig
	// AllowPrivateNetworks turns the SSRF guard off, so loopback, private,
	// link-local and metadata addresses may be dialled. Development and
	// tests only. Defaults to false.
	AllowPrivateNetworks bool
	// EgressProxy, when set, is an HTTP CONNECT proxy (http://[user:pass@]
	// host:port, see ParseEgressProxy) every webhook request goes through,
	// for fixed egress addresses. The SSRF guard still applies to the
	// destination: hookd resolves it and refuses forbidden addresses before
	// sending CONNECT for the checked IP. The proxy's own address is not
	// checked (it is the operator's, and may be private). Defaults to nil
	// (direct connections).
	EgressProxy *url.URL
	// EndpointCAFile is a PEM bundle of CA certificates trusted for https
	// endpoints in addition to the system roots (which, on Linux, follow
	// SSL_CERT_FILE and SSL_CERT_DIR): receivers with certificates of a
	// private CA. See LoadEndpointCAs. Defaults to "" (the system roots).
	EndpointCAFile string
	// endpointRoots is EndpointCAFile loaded, by validate; nil: the system
	// roots.
	endpointRoots *x509.CertPool
	// LogDeliveries logs one line per attempt (endpoint, event id, status,
	// duration) at info; without it the same lines are logged at debug.
	// Defaults to false.
	LogDeliveries bool
	// resolver replaces the DNS resolver of the proxied path (tests).
	resolver ssrf.Resolver
	// RetryJitter is the fraction of a tier's delay added at random to a
	// due time (see retrytiers.Policy). Defaults to 0.1; negative means none.
	RetryJitter float64
	// MaxPollRecords bounds one poll. Defaults to 1000.
	MaxPollRecords int
	// CommitInterval is how often the watermarks are committed.
	// Defaults to 1s.
	CommitInterval time.Duration
	// DrainTimeout bounds how long shutdown waits for requests in flight
	// (and their produces) before abandoning them; abandoned records are
	// re-read after the restart. Defaults to 30s.
	DrainTimeout time.Duration
	// RevokeTimeout bounds a rebalance's revoke or lost callback as a whole:
	// waiting for the revoked partitions' requests in flight (three quarters
	// of it) and committing their watermarks. The group's rebalance
	// timeout is RevokeTimeout plus 10s. Defaults to 20s.
	RevokeTimeout time.Duration
	// SessionTimeout is the consumer-group session timeout: how long the
	// group waits for a silent member (a dispatcher killed or frozen)
	// before its partitions, deliveries and tiers together, go to the
	// others. Shorter than Kafka's 45s default because, until then, the
	// dead member's endpoints receive nothing; long enough to ride out
	// pauses (heartbeats go every second). The broker must allow it
	// (group.min.session.timeout.ms, 6s by default). Defaults to 10s.
	SessionTimeout time.Duration
	// InstanceID makes the dispatcher a static member of its group
	// (KIP-345, Kafka 2.4+): a process restarted with the same id after a
	// crash takes its predecessor's place and partitions at once, and the
	// other members go on delivering (a restarted leader makes one
	// rebalance of live members, about a second: kgo rejoins to check the
	// subscriptions). A dynamic member's restart joins as a new member:
	// every member revokes (Range is eager) and the group waits for the
	// dead one's session to expire, so no dispatcher delivers for up to
	// SessionTimeout. A graceful stop still leaves the group (Run sends
	// the leave), so a scale-down hands its partitions over at once. Each
	// running process needs its own id, kept across its restarts (a pod's
	// name, which a container restarted in its pod keeps): a second
	// process with the same id fences the first. Letters, digits, '.', '_'
	// and '-', at most 249. Empty (the default): a dynamic member.
	InstanceID string
	// UserAgent is sent with every request. Defaults to "hookd/<version>".
	UserAgent string
	// ResumeMargin: a dispatcher taking a partition reads the attempts
	// partition of the same number back from this long before the first
	// record it fetched was written (a retry record: before it was due, if
	// that is later), up to its end, and finishes without a request the
	// records whose attempt records it finds (doc.go, "Resuming a
	// partition"). Records are attempted in order from then, so no attempt
	// of a later record is older; the margin covers the clocks of the
	// machines that wrote the record and the attempts (they may differ)
	// and the tiers' jitter. Too short re-sends answered records after a
	// crash; too long reads more back. Defaults to 30s; at most 1h.
	ResumeMargin time.Duration
}

// BreakerConfig configures the circuit breaker of each endpoint.
type BreakerConfig struct {
	// Disabled turns the breakers off. Defaults to false.
	Disabled bool
	// Window is the rolling window over which answers are counted, by the
	// time each answer (or timeout) arrived, so a request that took longer
	// than the window counts all the same. Defaults to 60s.
	Window time.Duration
	// MinRequests is how many answers the window must hold before the
	// breaker may trip on FailureRatio; that many failures in a row trip
	// it too, however far apart (an endpoint that times out slowly, one
	// request at a time). Defaults to 20.
	MinRequests uint32
	// FailureRatio is the share of failed requests in the window at or
	// above which the breaker trips. Defaults to 0.5.
	FailureRatio float64
	// OpenFor is how long a tripped breaker stays open before it lets
	// probes through (half-open). Defaults to 30s.
	OpenFor time.Duration
	// HalfOpenProbes is how many requests a half-open breaker lets through;
	// that many successes close it, one failure opens it again.
	// Defaults to 1.
	HalfOpenProbes uint32
	// IdleEvict is how long a closed breaker may go unused before it is
	// forgotten; open and half-open ones are never evicted. Defaults to 10m.
	IdleEvict time.Duration
}

func (c *Config) setDefaults() {
	if c.Group == "" {
		c.Group = "hookd-dispatchers"
	}
	c.Topics.SetDefaults()
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.MaxInFlight, 4)
	def(&c.MaxEndpointInFlight, 64)
	def(&c.Concurrency, 256)
	def(&c.PartitionMaxHeld, 2000)
	def(&c.EndpointBacklog, 1000)
	def(&c.ResponseExcerpt, 1024)
	def(&c.IdleConnsPerHost, c.Concurrency)
	def(&c.MaxPollRecords, 1000)
	defD(&c.ConnectTimeout, 3*time.Second)
	defD(&c.Timeout, 10*time.Second)
	defD(&c.AccountLinger, 10*time.Second)
	defD(&c.CommitInterval, time.Second)
	defD(&c.DrainTimeout, 30*time.Second)
	defD(&c.RevokeTimeout, 20*time.Second)
	defD(&c.SessionTimeout, 10*time.Second)
	defD(&c.ResumeMargin, 30*time.Second)
	if c.ResponseReadLimit == 0 {
		c.ResponseReadLimit = 64 << 10
	}
	if c.RetryJitter == 0 {
		c.RetryJitter = 0.1
	} else if c.RetryJitter < 0 {
		c.RetryJitter = 0
	}
	if c.UserAgent == "" {
		c.UserAgent = version.UserAgent()
	}
	b := &c.Breaker
	defD(&b.Window, 60*time.Second)
	defD(&b.OpenFor, 30*time.Second)
	defD(&b.IdleEvict, 10*time.Minute)
	if b.MinRequests == 0 {
		b.MinRequests = 20
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = 0.5
	}
	if b.HalfOpenProbes == 0 {
		b.HalfOpenProbes = 1
	}
}

func (c *Config) validate() error {
	if err := c.Topics.Validate(); err != nil {
		return err
	}
	if c.EndpointCAFile != "" {
		// Loaded here, once, so that a bad file is New's error.
		pool, err := LoadEndpointCAs(c.EndpointCAFile)
		if err != nil {
			return fmt.Errorf("dispatcher endpoint CA file: %w", err)
		}
		c.endpointRoots = pool
	}
	if c.EgressProxy != nil {
		if _, err := ParseEgressProxy(c.EgressProxy.String()); err != nil {
			return err
		}
	}
	if err := c.validateBounds(); err != nil {
		return err
	}
	if err := ValidateInstanceID(c.InstanceID); err != nil {
		return fmt.Errorf("dispatcher instance id: %w", err)
	}
	switch {
	case c.Group == "":
		return fmt.Errorf("dispatcher group: must not be empty")
	case c.ResumeMargin > time.Hour:
		return fmt.Errorf("dispatcher resume margin: at most 1h, got %s", c.ResumeMargin)
	case c.ConnectTimeout > c.Timeout:
		return fmt.Errorf("dispatcher connect timeout: %s is longer than the timeout %s", c.ConnectTimeout, c.Timeout)
	case c.MaxInFlight > c.MaxEndpointInFlight:
		return fmt.Errorf("dispatcher max in-flight: %d is more than the max endpoint in-flight %d", c.MaxInFlight, c.MaxEndpointInFlight)
	case c.RetryJitter > 1:
		return fmt.Errorf("dispatcher retry jitter: must be between 0 and 1, got %g", c.RetryJitter)
	case c.Breaker.FailureRatio <= 0 || c.Breaker.FailureRatio > 1:
		return fmt.Errorf("dispatcher breaker failure ratio: must be in (0, 1], got %g", c.Breaker.FailureRatio)
	case int64(c.ResponseExcerpt) > c.ResponseReadLimit:
		return fmt.Errorf("dispatcher response excerpt: %d is more than the read limit %d", c.ResponseExcerpt, c.ResponseReadLimit)
	}
	return nil
}

// validateBounds checks that the counts are at least 1 and the durations
// positive.
func (c *Config) validateBounds() error {
	positive := []struct {
		name string
		v    int64
	}{
		{"max in-flight", int64(c.MaxInFlight)},
		{"max endpoint in-flight", int64(c.MaxEndpointInFlight)},
		{"concurrency", int64(c.Concurrency)},
		{"partition max held", int64(c.PartitionMaxHeld)},
		{"endpoint backlog", int64(c.EndpointBacklog)},
		{"response read limit", c.ResponseReadLimit},
		{"response excerpt", int64(c.ResponseExcerpt)},
		{"idle conns per host", int64(c.IdleConnsPerHost)},
		{"max poll records", int64(c.MaxPollRecords)},
	}
	for _, p := range positive {
		if p.v < 1 {
			return fmt.Errorf("dispatcher %s: must be at least 1, got %d", p.name, p.v)
		}
	}
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"connect timeout", c.ConnectTimeout},
		{"timeout", c.Timeout},
		{"account linger", c.AccountLinger},
		{"commit interval", c.CommitInterval},
		{"drain timeout", c.DrainTimeout},
		{"revoke timeout", c.RevokeTimeout},
		{"session timeout", c.SessionTimeout},
		{"resume margin", c.ResumeMargin},
		{"breaker window", c.Breaker.Window},
		{"breaker open-for", c.Breaker.OpenFor},
		{"breaker idle evict", c.Breaker.IdleEvict},
	}
	for _, d := range durations {
		if d.v <= 0 {
			return fmt.Errorf("dispatcher %s: must be positive, got %s", d.name, d.v)
		}
	}
	return nil
}

// Deps are the dispatcher's collaborators.
type Deps struct {
	// Endpoints resolves endpoint ids. Required.
	Endpoints Endpoints
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the dispatcher's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock is the time source of due times and tier gates. Defaults to the
	// wall clock. HTTP timeouts, breakers and webhook timestamps always use
	// the wall clock.
	Clock clock.Clock
	// KafkaOpts are passed to the Kafka client before the dispatcher's own
	// options (seed brokers, TLS, SASL, logging, client metrics, tuning).
	// The dispatcher sets the consumer group, topics, balancer, commit mode,
	// rebalance callbacks, partitioner and producer linger (50ms: nothing
	// it produces is on a delivery's path) itself.
	KafkaOpts []kgo.Opt
	// PlainKafkaOpts are the options of the dispatcher's two other
	// clients: the producer of intent records (on a request's path: no
	// linger) and the short-lived reader of the attempts topic when a
	// partition is assigned. They must not carry a hook that keeps one
	// client's state (a kprom metrics hook given to KafkaOpts: a second
	// client sharing it races with the first). Defaults to KafkaOpts.
	PlainKafkaOpts []kgo.Opt
	// Tracer, when tracing is on, gets an HTTP client span per request, a
	// child of the delivery record's traceparent (the router's fan-out
	// span); its context goes in the attempt record's traceparent header
	// and, for an endpoint with SendTraceparent, in the request's. Nil or
	// a no-op tracer: no span, no header.
	Tracer trace.Tracer
}

// ValidateInstanceID returns an error unless id is empty or a name Kafka
// accepts as a group instance id (the rules of topic and group names).
func ValidateInstanceID(id string) error {
	if len(id) > 249 {
		return fmt.Errorf("%d characters, at most 249", len(id))
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
		if !ok {
			return fmt.Errorf("%q: letters, digits, '.', '_' and '-' only", id)
		}
	}
	return nil
}
