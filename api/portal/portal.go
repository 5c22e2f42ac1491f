// Package portal owns hookd's delivery portal under /portal/: server-rendered
// pages (html/template, CSS embedded, no JavaScript) where an account's
// people, and support staff on their behalf, see endpoints and their health,
// the delivery log, each delivery's attempts and payload, and the replay
// audit (with the operators' replays that sent the account's deliveries),
// and act: create, edit, enable, disable or delete an endpoint (new ones
// under the API's rules, api.CheckNewEndpoint), rotate its secret, send a
// test event, resend any delivery, replay one dead letter or recover an
// endpoint's dead letters since a time.
//
// Access is by one-time link (store.CreatePortalLink: hookctl portal link,
// POST /v1/portal-links) exchanged for an HttpOnly session cookie, or by
// the admin token posted to the support sign-in form. Every id read from a
// URL or a form is checked against the session's account (and endpoint):
// another account's id answers the same 404 page as a missing one. Every
// POST carries the session's CSRF token and must come from the portal's own
// origin. Pages are never cached, never framed (unless Config.FrameAncestors
// allows an origin) and send no referrer.
//
// It never sends HTTP to endpoints and never writes Kafka except through the
// paths every delivery takes: replays and resends go through package
// replay, and a test event is a delivery record on the deliveries topic, as
// the router writes it. Payloads are read from Kafka (package replay's
// ReadPayload), never stored. It never logs link or session tokens, nor secrets.
//
// Applications should not import this package: it is hookd's own code, with no compatibility promise.
package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/clock"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
)

// Config configures the portal.
type Config struct {
	// AdminToken lets support staff sign in (posted in a form, never in a
	// URL). Empty turns support sign-in off. Defaults to "".
	AdminToken string
	// BaseURL is the portal's public origin as browsers reach it
	// (scheme://host[:port], no path), e.g. https://hooks.example.com.
	// With https, cookies are Secure and __Host- prefixed; forms must come
	// from this origin. Empty derives both from each request (TLS or not,
	// its Host). Defaults to "".
	BaseURL string
	// FrameAncestors lists the origins allowed to frame the portal
	// (CSP frame-ancestors); empty denies framing. With origins and https,
	// the cookie is SameSite=None; Partitioned so that it works in a
	// cross-site iframe (the CSRF token then is the only defence).
	// Defaults to none.
	FrameAncestors []string
	// SessionIdle ends a session unused for this long. Defaults to 30m.
	SessionIdle time.Duration
	// SessionMax ends a session this long after it opened. Defaults to 12h.
	SessionMax time.Duration
	// PageSize is the rows per page of the delivery log. Defaults to 50.
	PageSize int
	// Name is the product name on every page and in the portal's messages
	// (hookd --portal-name). Defaults to "hookd".
	Name string
	// AccentColor (#rgb or #rrggbb) replaces the portal's accent colour
	// (links, the active tab, buttons) in both colour schemes.
	// Defaults to "" (the portal's own blue).
	AccentColor string
	// LogoURL is shown before Name in the header: a path on the portal's
	// own origin ("/brand/logo.svg") or a data:image/...;base64 URL, never
	// another origin (the page's CSP allows no other). Defaults to "".
	LogoURL string
	// Topics is the topic layout hookd runs with: the retry schedule and
	// the retention the policy page publishes. Defaults to topics.Config's
	// defaults.
	Topics topics.Config
	// DisableAfter is hookd's --disable-after: an endpoint failing
	// continuously this long is disabled. Defaults to 72h.
	DisableAfter time.Duration
	// AttemptRetention is how long the attempt log is kept (hookd
	// --attempt-retention). Defaults to 30 days.
	AttemptRetention time.Duration
	// RequestTimeout is the dispatcher's --request-timeout: the timeout of
	// endpoints that set none, and the longest one may set.
	// Defaults to 10s.
	RequestTimeout time.Duration
	// MaxInFlight is the dispatcher's --max-in-flight, shown as the
	// default limit. Defaults to 4.
	MaxInFlight int
	// ReplayRate caps how many dead letters per second a recovery started
	// in the portal replays. Defaults to 50.
	ReplayRate float64
	// ReplayLimit caps how many dead letters one recovery replays.
	// Defaults to 10000.
	ReplayLimit int64
	// AllowPrivateNetworks accepts endpoint URLs whose host is, or
	// resolves to, a private or special-purpose address (development
	// only), as the API's setting of the same name. Defaults to false.
	AllowPrivateNetworks bool
	// PayloadTimeout bounds reading a delivery's payload from Kafka for
	// the detail page. Defaults to 3s.
	PayloadTimeout time.Duration
}

// SetDefaults fills the zero fields with their defaults.
func (c *Config) SetDefaults() {
	def := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.SessionIdle, 30*time.Minute)
	def(&c.SessionMax, 12*time.Hour)
	def(&c.DisableAfter, 72*time.Hour)
	def(&c.AttemptRetention, 30*24*time.Hour)
	def(&c.RequestTimeout, 10*time.Second)
	def(&c.PayloadTimeout, 3*time.Second)
	if c.PageSize == 0 {
		c.PageSize = 50
	}
	if c.Name == "" {
		c.Name = "hookd"
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4
	}
	if c.ReplayRate == 0 {
		c.ReplayRate = 50
	}
	if c.ReplayLimit == 0 {
		c.ReplayLimit = 10000
	}
	c.Topics.SetDefaults()
}

// Validate reports a bad setting, naming it; call it after SetDefaults.
func (c *Config) Validate() error {
	if c.BaseURL != "" {
		if _, err := parseOrigin(c.BaseURL); err != nil {
			return fmt.Errorf("portal base url: %w", err)
		}
	}
	for _, o := range c.FrameAncestors {
		if _, err := parseOrigin(o); err != nil {
			return fmt.Errorf("portal frame ancestors: %w", err)
		}
	}
	switch {
	case c.SessionIdle < time.Minute || c.SessionIdle > c.SessionMax:
		return fmt.Errorf("portal session idle: must be 1m..the session max (%s), got %s", c.SessionMax, c.SessionIdle)
	case c.SessionMax > 7*24*time.Hour:
		return fmt.Errorf("portal session max: at most 168h, got %s", c.SessionMax)
	case c.PageSize < 1 || c.PageSize > 500:
		return fmt.Errorf("portal page size: must be 1..500, got %d", c.PageSize)
	case c.ReplayRate < 0 || c.ReplayLimit < 0:
		return fmt.Errorf("portal replay rate and limit: must not be negative, got %g and %d", c.ReplayRate, c.ReplayLimit)
	case c.PayloadTimeout < 0:
		return fmt.Errorf("portal payload timeout: must not be negative, got %s", c.PayloadTimeout)
	}
	if err := c.validateBrand(); err != nil {
		return err
	}
	return c.Topics.Validate()
}

// parseOrigin checks an origin: http or https, a host, nothing else.
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("%q is not an origin such as https://app.example.com", s)
	}
	return u.Scheme + "://" + strings.ToLower(u.Host), nil
}

// Deps are what the portal needs from the start.
type Deps struct {
	// Logger receives the portal's log lines. Defaults to discarding.
	Logger *slog.Logger
	// Resolver looks endpoint hosts up for the SSRF check of edited URLs.
	// Defaults to net.DefaultResolver.
	Resolver ssrf.Resolver
	// Clock is the time source. Defaults to clock.System{}.
	Clock clock.Clock
	// ReplaySlots are the API's replay slots (api.V1): a portal resend
	// holds one of its account's, as an API resend does, so the portal is
	// no way around the API's limit. Defaults to the portal's own slots
	// with the API's default caps (2 per account, 8 in all).
	ReplaySlots ReplaySlots
}

var _ ReplaySlots = (*api.V1)(nil)

// ReplaySlots count the replays and resends running, per account and in
// all; api.V1 implements it.
type ReplaySlots interface {
	// AcquireReplay takes a slot of account, false when none is free.
	AcquireReplay(account string) bool
	ReleaseReplay(account string)
}

// Backend is what the pages read and write, available once the daemon has
// connected to Postgres and Kafka.
type Backend struct {
	Store *store.Store
	// Replay carries the Kafka options and topic names; its Store is set
	// from Store.
	Replay replay.Deps
}

// now is the portal's clock.
func (h *Handler) now() time.Time { return h.clock.Now() }

// Handler serves the portal. Create it with New, mount it with Routes and
// Attach the backend when it is ready; until then pages answer 503.
type Handler struct {
	cfg      Config
	logger   *slog.Logger
	resolver ssrf.Resolver
	pages    *pages
	clock    clock.Clock

	mu      sync.RWMutex
	be      *Backend
	baseCtx context.Context
	runs    sync.WaitGroup
	slots   ReplaySlots
}

// New checks cfg and returns a portal handler.
func New(cfg Config, deps Deps) (*Handler, error) {
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.BaseURL != "" {
		cfg.BaseURL, _ = parseOrigin(cfg.BaseURL)
	}
	for i, o := range cfg.FrameAncestors {
		cfg.FrameAncestors[i], _ = parseOrigin(o)
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Resolver == nil {
		deps.Resolver = net.DefaultResolver
	}
	if deps.Clock == nil {
		deps.Clock = clock.System{}
	}
	if deps.ReplaySlots == nil {
		deps.ReplaySlots = &ownSlots{max: 8, perAccount: 2}
	}
	p, err := loadPages()
	if err != nil {
		return nil, err
	}
	return &Handler{cfg: cfg, logger: deps.Logger, resolver: deps.Resolver, pages: p, clock: deps.Clock,
		slots: deps.ReplaySlots}, nil
}

// Attach makes the backend available. Replays started in the portal run in
// the background under ctx: they stop (resumably) when it ends.
func (h *Handler) Attach(ctx context.Context, be Backend) {
	be.Replay.Store = be.Store
	if be.Replay.Logger == nil {
		be.Replay.Logger = h.logger
	}
	h.mu.Lock()
	h.be, h.baseCtx = &be, ctx
	h.mu.Unlock()
}

// Wait blocks until the replays started in the portal have stopped.
func (h *Handler) Wait() { h.runs.Wait() }

func (h *Handler) backend() (*Backend, context.Context) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.be, h.baseCtx
}

// errBadInput is wrapped by what a form or query got wrong; the page says
// it with a 400.
var errBadInput = errors.New("bad input")

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errBadInput, fmt.Sprintf(format, args...))
}

// Routes mounts every page and action under /portal/.
func (h *Handler) Routes(mux *http.ServeMux) {
	for _, rt := range h.routes() {
		mux.Handle(rt.pattern, h.wrap(rt))
	}
	mux.Handle("GET /portal/static/", h.static())
	mux.HandleFunc("GET /portal/brand.css", h.brandCSS)
	mux.HandleFunc("GET /portal/timezone", h.setZone)
	mux.Handle("/portal/", h.wrap(route{pattern: "/portal/", public: true, handle: (*Handler).notFoundPage}))
}
