package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/store"
)

// EventTypeEndpointDisabled is the type of the event produced to the
// operational topic (webhooks.ops) when hookd disables an endpoint.
const EventTypeEndpointDisabled = "endpoint.disabled"

// Event is an operational event on the ops topic, keyed by endpoint id. Its
// JSON fields are part of hookd's contract (docs/operations):
//
//	{"id": "endpoint.disabled:ep_1:1767225600000000000", "type": "endpoint.disabled",
//	 "endpoint_id": "ep_1", "account": "acct_1", "url": "https://...",
//	 "reason": "failing", "detail": "failing: failing continuously since ...",
//	 "failing_since": "2026-01-01T00:00:00Z", "disabled_at": "2026-01-04T00:00:00Z"}
//
// The event is produced at least once: consumers dedupe on id, which is the
// same for every copy of one disablement.
type Event struct {
	// ID identifies one disablement of one endpoint.
	ID   string `json:"id"`
	Type string `json:"type"`
	// EndpointID, Account and URL name the endpoint.
	EndpointID string `json:"endpoint_id"`
	Account    string `json:"account"`
	URL        string `json:"url"`
	// Reason is "gone" (it answered 410), "failing" (failing continuously
	// for longer than --disable-after), or the reason code of another tool.
	Reason string `json:"reason"`
	// Detail is the endpoint's disabled_reason, for humans.
	Detail string `json:"detail"`
	// FailingSince is when the run of failures began; absent if unknown.
	FailingSince time.Time `json:"failing_since,omitzero"`
	DisabledAt   time.Time `json:"disabled_at"`
}

// DisabledEvent is the endpoint.disabled event of d.
func DisabledEvent(d store.DisabledEndpoint) Event {
	return Event{
		ID:           EventTypeEndpointDisabled + ":" + d.ID + ":" + strconv.FormatInt(d.DisabledAt.UnixNano(), 10),
		Type:         EventTypeEndpointDisabled,
		EndpointID:   d.ID,
		Account:      d.Account,
		URL:          d.URL,
		Reason:       d.Reason,
		Detail:       d.Detail,
		FailingSince: d.FailingSince.UTC(),
		DisabledAt:   d.DisabledAt.UTC(),
	}
}

// Record encodes e for topic, keyed by endpoint id.
func (e Event) Record(topic string) (*kgo.Record, error) {
	v, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding %s event: %w", e.Type, err)
	}
	return &kgo.Record{Topic: topic, Key: []byte(e.EndpointID), Value: v}, nil
}

// DecodeEvent reads an ops-topic record.
func DecodeEvent(r *kgo.Record) (Event, error) {
	var e Event
	if err := json.Unmarshal(r.Value, &e); err != nil {
		return e, fmt.Errorf("decoding ops event: %w", err)
	}
	if e.Type == "" || e.ID == "" {
		return e, errors.New("decoding ops event: no type or id")
	}
	return e, nil
}

// Metrics are the endpoint-health metrics. One set per registry: every
// Announcer on the same registry shares it.
type Metrics struct {
	disabled *prometheus.CounterVec
	events   *prometheus.CounterVec
}

// NewMetrics registers the health metrics on reg, or returns the ones
// already registered there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	disabled, err := registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookd_endpoints_disabled_total",
		Help: "Endpoints disabled by hookd, by reason (gone, failing).",
	}, []string{"reason"}))
	if err != nil {
		return nil, err
	}
	events, err := registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hookd_ops_events_total",
		Help: "Operational events produced to the ops topic, by type and result (produced, failed).",
	}, []string{"type", "result"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{disabled: disabled, events: events}, nil
}

func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("registering metrics: %w", err)
	}
	return c, nil
}

// Announcer makes a disablement known: a log line, a metric, and the
// endpoint.disabled event on the ops topic, after which the endpoint row is
// marked notified. Announcing twice produces the event twice with one id.
type Announcer struct {
	client  *kgo.Client
	store   *store.Store
	topic   string
	alerts  AlertTopics
	logger  *slog.Logger
	metrics *Metrics
}

// NewAnnouncer produces with client: endpoint.disabled to t.Ops, and the
// hookd.endpoint.disabled owner alert to t.Events and t.Ops (none when
// t.Events is empty). client may also be a consumer.
func NewAnnouncer(client *kgo.Client, st *store.Store, t AlertTopics, logger *slog.Logger, m *Metrics) *Announcer {
	return &Announcer{client: client, store: st, topic: t.Ops, alerts: t, logger: logger, metrics: m}
}

// Disabled logs and counts endpoints just disabled by hookd, then publishes
// their events. A publication error is returned after logging; the event
// stays owed in Postgres and a later Flush produces it.
func (a *Announcer) Disabled(ctx context.Context, ds []store.DisabledEndpoint) error {
	for _, d := range ds {
		a.metrics.disabled.WithLabelValues(d.Reason).Inc()
		a.logger.WarnContext(ctx, "endpoint disabled",
			"endpoint_id", d.ID, "account", d.Account, "reason", d.Reason, "detail", d.Detail,
			"failing_since", d.FailingSince, "disabled_at", d.DisabledAt)
	}
	return a.publish(ctx, ds)
}

// Flush publishes the events still owed (a crash between the disabling
// commit and the produce, a Kafka error, an endpoint disabled by another
// tool), up to limit of them.
func (a *Announcer) Flush(ctx context.Context, limit int) error {
	owed, err := a.store.PendingDisabledNotifications(ctx, limit)
	if err != nil {
		return err
	}
	return a.publish(ctx, owed)
}

func (a *Announcer) publish(ctx context.Context, ds []store.DisabledEndpoint) error {
	if len(ds) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, 0, len(ds))
	of := make(map[*kgo.Record]store.DisabledEndpoint, len(ds)) // results come in completion order
	for _, d := range ds {
		r, err := DisabledEvent(d).Record(a.topic)
		if err != nil {
			return err
		}
		recs = append(recs, r)
		of[r] = d
	}
	var errs []error
	for _, res := range a.client.ProduceSync(ctx, recs...) {
		d := of[res.Record]
		if res.Err != nil {
			a.metrics.events.WithLabelValues(EventTypeEndpointDisabled, "failed").Inc()
			a.logger.ErrorContext(ctx, "producing endpoint.disabled event failed; will retry",
				"endpoint_id", d.ID, "topic", a.topic, "error", res.Err)
			errs = append(errs, fmt.Errorf("producing endpoint.disabled for %s: %w", d.ID, res.Err))
			continue
		}
		a.metrics.events.WithLabelValues(EventTypeEndpointDisabled, "produced").Inc()
		a.logger.InfoContext(ctx, "endpoint.disabled event produced", "endpoint_id", d.ID, "topic", a.topic,
			"partition", res.Record.Partition, "offset", res.Record.Offset)
		errs = append(errs, a.disabledAlert(ctx, d))
	}
	return errors.Join(errs...)
}

// disabledAlert produces the hookd.endpoint.disabled alert of d, then marks
// d notified: until both events are out, d stays owed.
func (a *Announcer) disabledAlert(ctx context.Context, d store.DisabledEndpoint) error {
	mark := func() error { return a.store.MarkDisabledNotified(ctx, d.ID, d.DisabledAt) }
	if a.alerts.Events == "" {
		return mark()
	}
	// The ops topic has its endpoint.disabled event already.
	return a.produceAlert(ctx, DisabledAlert(d, a.alerts.PortalBaseURL), false, mark)
}
