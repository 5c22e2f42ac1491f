package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hookd/hookd/internal/drain"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one readiness dependency; it returns nil when healthy.
type Check func(ctx context.Context) error

// Config configures the HTTP server.
type Config struct {
	// Listen is the host:port to serve on. Defaults to "127.0.0.1:8080".
	Listen string
	// ReadyTimeout bounds each readiness check. Defaults to 2s.
	ReadyTimeout time.Duration
	// Pprof mounts net/http/pprof's handlers at /debug/pprof/. Defaults to
	// false.
	Pprof bool
	// AdminToken, when set, is required (Authorization: Bearer) by the
	// pprof handlers. Defaults to "" (pprof open to whoever reaches Listen).
	AdminToken string
	// ReadHeaderTimeout bounds reading a request's headers. Defaults to 10s.
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included; it must
	// let a slow client send MaxBodyBytes. Defaults to 30s (64 KiB at
	// about 2 KiB/s).
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its response. No handler streams for long: the longest answers
	// are pprof's profile and trace, which extend their own deadline by
	// the seconds asked for. Defaults to 60s.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request
	// for this long. Keep it above the idle timeout of a load balancer in
	// front (AWS ALB: 60s), which then closes first. Defaults to 120s.
	IdleTimeout time.Duration
	// MaxConns caps the connections open at once; beyond it a new
	// connection is closed on accept and counted in
	// hookd_http_connections_refused_total. Defaults to 1024.
	MaxConns int
	// MaxConnsPerClient caps the connections open at once from one client
	// address (one IPv4 address, one IPv6 /64); behind a reverse proxy
	// every connection comes from the proxy. At most MaxConns.
	// Defaults to 64.
	MaxConnsPerClient int
	// MaxBodyBytes caps every request body before routing and
	// authentication: 413 beyond it. It must be at least the largest body
	// a handler accepts (the API's V1Config.MaxBodyBytes, the portal's
	// forms). Defaults to 64 KiB.
	MaxBodyBytes int64
}

// DefaultMaxBodyBytes is Config.MaxBodyBytes's default: the portal's
// forms and the API's default V1Config.MaxBodyBytes.
const DefaultMaxBodyBytes = 64 << 10

// SetDefaults fills the zero fields with their defaults.
func (c *Config) SetDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 2 * time.Second
	}
	for _, d := range []struct {
		field *time.Duration
		def   time.Duration
	}{{&c.ReadHeaderTimeout, 10 * time.Second}, {&c.ReadTimeout, 30 * time.Second}, {&c.WriteTimeout, 60 * time.Second}, {&c.IdleTimeout, 120 * time.Second}} {
		if *d.field == 0 {
			*d.field = d.def
		}
	}
	if c.MaxConns == 0 {
		c.MaxConns = 1024
	}
	if c.MaxConnsPerClient == 0 {
		c.MaxConnsPerClient = min(64, c.MaxConns)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
}

func (c *Config) validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port", c.Listen)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read header timeout", c.ReadHeaderTimeout}, {"read timeout", c.ReadTimeout}, {"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout}} {
		if d.v < time.Millisecond {
			return fmt.Errorf("listen %s: must be at least 1ms, got %s", d.name, d.v)
		}
	}
	switch {
	case c.MaxConns < 1:
		return fmt.Errorf("listen max conns: must be at least 1, got %d", c.MaxConns)
	case c.MaxConnsPerClient < 1 || c.MaxConnsPerClient > c.MaxConns:
		return fmt.Errorf("listen max conns per client: must be 1..%d (max conns), got %d", c.MaxConns, c.MaxConnsPerClient)
	case c.MaxBodyBytes < 1:
		return fmt.Errorf("listen max body bytes: must be at least 1, got %d", c.MaxBodyBytes)
	}
	return nil
}

// Deps are what the server serves.
type Deps struct {
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
	// Registerer takes the listener's own metrics (open and refused
	// connections); nil leaves them unexported.
	Registerer prometheus.Registerer
	// Checks are the readiness checks by name, e.g. "kafka", "postgres".
	Checks map[string]Check
	// Routes mounts further handlers (the JSON API) on the mux.
	Routes func(mux *http.ServeMux)
}

// Server is hookd's HTTP server.
type Server struct {
	cfg  Config
	deps Deps
	ln   net.Listener
	srv  *http.Server
}

// Listen binds the address, so that a port in use is reported at start-up
// before anything slow happens.
func Listen(cfg Config, deps Deps) (*Server, error) {
	cfg.SetDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, listenCause(err))
	}
	limited := newConnLimits(ln, cfg.MaxConns, cfg.MaxConnsPerClient)
	if deps.Registerer != nil {
		if err := limited.register(deps.Registerer); err != nil {
			ln.Close()
			return nil, err
		}
	}
	s := &Server{cfg: cfg, deps: deps, ln: limited}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(deps.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(deps.Logger.Handler(), slog.LevelError)}))
	if cfg.Pprof {
		mountPprof(mux, cfg.AdminToken)
	}
	if deps.Routes != nil {
		deps.Routes(mux)
	}
	s.srv = &http.Server{Handler: limitBodies(mux, cfg.MaxBodyBytes),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout,
		ErrorLog: slog.NewLogLogger(deps.Logger.Handler(), slog.LevelDebug)}
	return s, nil
}

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Run serves until ctx ends, then shuts down, letting in-flight requests
// finish for up to five seconds.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	s.deps.Logger.InfoContext(ctx, "http listening", "addr", s.Addr())
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := drain.Context(ctx, 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// Close releases the listener of a server that never ran.
func (s *Server) Close() error { return s.ln.Close() }

// ready runs the checks side by side, so /readyz answers within one
// ReadyTimeout however many there are; a check that reads a state kept up
// to date elsewhere (the Kafka outage monitor) answers at once.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
	defer cancel()
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = make(map[string]string, len(s.deps.Checks))
	)
	status := http.StatusOK
	for name, check := range s.deps.Checks {
		wg.Go(func() {
			err := check(ctx)
			mu.Lock()
			defer mu.Unlock()
			out[name] = "ok"
			if err != nil {
				out[name], status = err.Error(), http.StatusServiceUnavailable
			}
		})
	}
	wg.Wait()
	writeJSON(w, status, out)
}

// listenCause drops net's "listen tcp <addr>:" prefix, which repeats the
// address the caller names already.
func listenCause(err error) error {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err
	}
	return err
}
