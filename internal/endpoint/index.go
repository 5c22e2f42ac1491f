package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookd/hookd/internal/pgnotify"
)

// Source is where the Index reads endpoints from; *store.Store implements
// it.
type Source interface {
	// AllEndpoints returns every endpoint, disabled ones included.
	AllEndpoints(ctx context.Context) ([]Endpoint, error)
	// EndpointsByID returns the endpoints of ids that still exist.
	EndpointsByID(ctx context.Context, ids []string) ([]Endpoint, error)
	// ListenEndpointChanges holds a connection listening for endpoint
	// changes: once listening it calls onListening, then onChange with the
	// id of every endpoint inserted, updated or deleted, until ctx ends or
	// the connection fails.
	ListenEndpointChanges(ctx context.Context, onListening func(context.Context) error, onChange func(id string)) error
}

// IndexConfig configures an Index.
type IndexConfig struct {
	// ResyncInterval is how often the whole table is re-read even without
	// notifications, a safety net for a silently dead LISTEN connection.
	// Defaults to 5m.
	ResyncInterval time.Duration
	// RetryBackoff is the first pause after the listening connection
	// fails; it doubles up to 30s. Defaults to 500ms.
	RetryBackoff time.Duration
}

func (c *IndexConfig) setDefaults() { pgnotify.DefaultTiming(&c.ResyncInterval, &c.RetryBackoff) }

func (c *IndexConfig) validate() error {
	return pgnotify.ValidateTiming("endpoint index", c.ResyncInterval, c.RetryBackoff)
}

// IndexDeps are the Index's collaborators.
type IndexDeps struct {
	// Source is required.
	Source Source
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the index metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Index is an in-memory copy of webhooks.endpoints, grouped by account,
// kept fresh by LISTEN/NOTIFY with a full reload on every (re)connect. It
// is safe for concurrent use; lookups never touch Postgres.
type Index struct {
	cfg    IndexConfig
	src    Source
	logger *slog.Logger

	mu        sync.RWMutex
	byID      map[string]*Endpoint
	byAccount map[string][]*Endpoint // active and disabled, sorted by id

	// refreshMu serialises each read of Postgres with the install of its
	// result, so a slow full reload never overwrites a newer refresh.
	refreshMu sync.Mutex

	readyOnce sync.Once
	ready     chan struct{}

	size     prometheus.Gauge
	reloads  prometheus.Counter
	failures prometheus.Counter
}

// NewIndex returns an empty Index; Run fills it.
func NewIndex(cfg IndexConfig, deps IndexDeps) (*Index, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if deps.Source == nil {
		return nil, errors.New("endpoint index: no source")
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	x := &Index{
		cfg:       cfg,
		src:       deps.Source,
		logger:    deps.Logger,
		byID:      map[string]*Endpoint{},
		byAccount: map[string][]*Endpoint{},
		ready:     make(chan struct{}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_endpoint_index_endpoints", Help: "Endpoints held by the in-memory endpoint index."}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_endpoint_index_reloads_total", Help: "Full reloads of the endpoint index."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_endpoint_index_errors_total", Help: "Failures of the endpoint index's listening connection or refresh queries."}),
	}
	if deps.Registerer != nil {
		for _, c := range []prometheus.Collector{x.size, x.reloads, x.failures} {
			if err := deps.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("endpoint index metrics: %w", err)
			}
		}
	}
	return x, nil
}

// Ready is closed once the first full load has succeeded. Components that
// fan out must wait for it: before it, every event would match nothing.
func (x *Index) Ready() <-chan struct{} { return x.ready }

// WaitReady blocks until the first full load or the end of ctx.
func (x *Index) WaitReady(ctx context.Context) error {
	select {
	case <-x.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the endpoint index: %w", context.Cause(ctx))
	}
}

// Run keeps the index fresh until ctx ends; it returns nil then. A failing
// connection is retried with backoff and the index keeps serving its last
// state meanwhile.
func (x *Index) Run(ctx context.Context) error {
	pgnotify.Follow(ctx, pgnotify.Params{
		Name:           "endpoint index",
		ResyncInterval: x.cfg.ResyncInterval,
		RetryBackoff:   x.cfg.RetryBackoff,
		Listen:         x.src.ListenEndpointChanges,
		Reload:         x.reload,
		Refresh:        x.refresh,
		Logger:         x.logger,
		Failures:       x.failures,
	})
	return nil
}

// refresh re-reads the endpoints named by notifications.
func (x *Index) refresh(ctx context.Context, ids []string) error {
	x.refreshMu.Lock()
	defer x.refreshMu.Unlock()
	eps, err := x.src.EndpointsByID(ctx, ids)
	if err != nil {
		return fmt.Errorf("loading changed endpoints: %w", err)
	}
	x.apply(ids, eps)
	return nil
}

func (x *Index) reload(ctx context.Context) error {
	x.refreshMu.Lock()
	defer x.refreshMu.Unlock()
	eps, err := x.src.AllEndpoints(ctx)
	if err != nil {
		return fmt.Errorf("loading endpoints: %w", err)
	}
	x.replaceAll(eps)
	x.reloads.Inc()
	x.readyOnce.Do(func() { close(x.ready) })
	return nil
}

func (x *Index) replaceAll(eps []Endpoint) {
	byID := make(map[string]*Endpoint, len(eps))
	byAccount := map[string][]*Endpoint{}
	for i := range eps {
		e := &eps[i]
		x.compile(e)
		byID[e.ID] = e
		byAccount[e.Account] = append(byAccount[e.Account], e)
	}
	for _, list := range byAccount {
		sortByID(list)
	}
	x.mu.Lock()
	x.byID, x.byAccount = byID, byAccount
	x.mu.Unlock()
	x.size.Set(float64(len(byID)))
}

// apply installs fresh copies of the endpoints named by ids: those in eps
// are upserted, the others were deleted.
func (x *Index) apply(ids []string, eps []Endpoint) {
	fresh := make(map[string]*Endpoint, len(eps))
	for i := range eps {
		x.compile(&eps[i])
		fresh[eps[i].ID] = &eps[i]
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	touched := map[string]struct{}{}
	for _, id := range ids {
		if old, ok := x.byID[id]; ok {
			touched[old.Account] = struct{}{}
			delete(x.byID, id)
		}
		if e, ok := fresh[id]; ok {
			x.byID[id] = e
			touched[e.Account] = struct{}{}
		}
	}
	// Rebuild the touched accounts' lists as new slices: readers may still
	// hold the old ones.
	for acct := range touched {
		var list []*Endpoint
		for _, e := range x.byAccount[acct] {
			if cur, ok := x.byID[e.ID]; ok && cur == e {
				list = append(list, e)
			}
		}
		for _, e := range fresh {
			if e.Account == acct {
				list = append(list, e)
			}
		}
		sortByID(list)
		if len(list) == 0 {
			delete(x.byAccount, acct)
		} else {
			x.byAccount[acct] = list
		}
	}
	x.size.Set(float64(len(x.byID)))
}

// compile compiles e's payload filter once per load, so the router's
// fan-out only evaluates it.
func (x *Index) compile(e *Endpoint) {
	if err := e.CompileFilter(); err != nil {
		x.logger.Warn("endpoint index: the endpoint's payload filter is ignored: it receives every event of its types",
			"endpoint_id", e.ID, "error", err.Error())
	}
}

func sortByID(list []*Endpoint) {
	slices.SortFunc(list, func(a, b *Endpoint) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
}

// Match appends to dst every endpoint of account subscribed to eventType,
// disabled ones included, in id order, and returns it. Disabled endpoints
// are matched on purpose: their deliveries are dead-lettered with reason
// endpoint_disabled, so what they missed can be resent once re-enabled
// (hookctl endpoints resend); deleting an endpoint stops that. The endpoints are shared:
// read-only.
func (x *Index) Match(account, eventType string, dst []*Endpoint) []*Endpoint {
	x.mu.RLock()
	list := x.byAccount[account]
	x.mu.RUnlock()
	for _, e := range list {
		if e.Subscribes(eventType) {
			dst = append(dst, e)
		}
	}
	return dst
}

// MatchEvent is Match for one event whose payload is data: for hookd's
// operational events ("hookd." types) it leaves out the endpoint the event
// is about (data's "endpoint_id"), so an alert about an endpoint is never
// sent to that same endpoint.
func (x *Index) MatchEvent(account, eventType string, data []byte, dst []*Endpoint) []*Endpoint {
	start := len(dst)
	dst = x.Match(account, eventType, dst)
	subject := AlertSubject(eventType, data)
	if subject == "" {
		return dst
	}
	kept := slices.DeleteFunc(dst[start:], func(e *Endpoint) bool { return e.ID == subject })
	return dst[:start+len(kept)]
}

// AlertSubject is the endpoint an operational event ("hookd." type) is
// about: its data's "endpoint_id". It is "" for other types and for data
// without one.
func AlertSubject(eventType string, data []byte) string {
	if !strings.HasPrefix(eventType, OpsTypePrefix) {
		return ""
	}
	var v struct {
		EndpointID string `json:"endpoint_id"`
	}
	if json.Unmarshal(data, &v) != nil {
		return ""
	}
	return v.EndpointID
}

// Endpoint returns the endpoint with id, disabled or not, as last seen by
// the index.
func (x *Index) Endpoint(id string) (Endpoint, bool) {
	x.mu.RLock()
	e, ok := x.byID[id]
	x.mu.RUnlock()
	if !ok {
		return Endpoint{}, false
	}
	return *e, true
}

// Len returns the number of endpoints held.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byID)
}
