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
}

func (c *Config) setDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = 2 * time.Second
	}
}

// Deps are what the server serves.
type Deps struct {
	Logger   *slog.Logger
	Gatherer prometheus.Gatherer
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
	cfg.setDefaults()
	if _, _, err := net.SplitHostPort(cfg.Listen); err != nil {
		return nil, fmt.Errorf("listen: %q is not host:port", cfg.Listen)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, listenCause(err))
	}
	s := &Server{cfg: cfg, deps: deps, ln: ln}
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
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(deps.Logger.Handler(), slog.LevelDebug)}
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
