package eventtype

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/pgnotify"
)

// Source is where a Catalog reads the catalogue from; *store.Store
// implements it.
type Source interface {
	// AllEventTypes returns the whole catalogue.
	AllEventTypes(ctx context.Context) ([]Type, error)
	// ListenEventTypeChanges holds a connection listening for catalogue
	// changes: once listening it calls onListening, then onChange with the
	// name of every type inserted, updated or deleted, until ctx ends or
	// the connection fails.
	ListenEventTypeChanges(ctx context.Context, onListening func(context.Context) error, onChange func(name string)) error
}

// CatalogConfig configures a Catalog.
type CatalogConfig struct {
	// ResyncInterval is how often the catalogue is re-read even without
	// notifications, a safety net for a silently dead LISTEN connection.
	// Defaults to 5m.
	ResyncInterval time.Duration
	// RetryBackoff is the first pause after the listening connection
	// fails; it doubles up to 30s. Defaults to 500ms.
	RetryBackoff time.Duration
}

func (c *CatalogConfig) setDefaults() { pgnotify.DefaultTiming(&c.ResyncInterval, &c.RetryBackoff) }

func (c *CatalogConfig) validate() error {
	return pgnotify.ValidateTiming("event-type catalog", c.ResyncInterval, c.RetryBackoff)
}

// Catalog is an in-memory copy of the catalogue's schemas, compiled, kept
// fresh by LISTEN/NOTIFY with a full reload on every notification (the
// catalogue is small and changes rarely) and every (re)connect. It is safe
// for concurrent use; Validate never touches Postgres.
type Catalog struct {
	cfg    CatalogConfig
	src    Source
	logger *slog.Logger

	mu      sync.RWMutex
	schemas map[string]*Schema
	// reloadMu serialises each read with the install of its result, so a
	// slow reload never overwrites a newer one.
	reloadMu sync.Mutex

	readyOnce sync.Once
	ready     chan struct{}
}

// NewCatalog returns an empty Catalog; Run fills it.
func NewCatalog(cfg CatalogConfig, src Source, logger *slog.Logger) (*Catalog, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if src == nil {
		return nil, errors.New("event-type catalog: no source")
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Catalog{cfg: cfg, src: src, logger: logger, schemas: map[string]*Schema{},
		ready: make(chan struct{})}, nil
}

// WaitReady blocks until the first full load or the end of ctx.
func (c *Catalog) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the event-type catalog: %w", context.Cause(ctx))
	}
}

// Validate checks an event's data against its type's schema. A type not
// in the catalogue, or without a schema, accepts any data. The error names
// the first violation.
func (c *Catalog) Validate(eventType string, data []byte) error {
	c.mu.RLock()
	s := c.schemas[eventType]
	c.mu.RUnlock()
	if s == nil {
		return nil
	}
	return s.Validate(data)
}

// Run keeps the catalog fresh until ctx ends; it returns nil then. A
// failing connection is retried with backoff and the catalog keeps its
// last state meanwhile.
func (c *Catalog) Run(ctx context.Context) error {
	pgnotify.Follow(ctx, pgnotify.Params{
		Name:           "event-type catalog",
		ResyncInterval: c.cfg.ResyncInterval,
		RetryBackoff:   c.cfg.RetryBackoff,
		Listen:         c.src.ListenEventTypeChanges,
		Reload:         c.reload, // on every notification too: no Refresh
		Logger:         c.logger,
	})
	return nil
}

// reload reads and compiles the whole catalogue. A stored schema that no
// longer compiles (written around hookd) validates nothing and is logged.
func (c *Catalog) reload(ctx context.Context) error {
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	types, err := c.src.AllEventTypes(ctx)
	if err != nil {
		return err
	}
	schemas := make(map[string]*Schema, len(types))
	for _, t := range types {
		if !isSet(t.Schema) {
			continue
		}
		s, err := Compile(t.Schema)
		if err != nil {
			c.logger.WarnContext(ctx, "event-type catalog: a stored schema does not compile; its type is not validated",
				"event_type", t.Name, "error", err.Error())
			continue
		}
		schemas[t.Name] = s
	}
	c.mu.Lock()
	c.schemas = schemas
	c.mu.Unlock()
	c.readyOnce.Do(func() { close(c.ready) })
	return nil
}
