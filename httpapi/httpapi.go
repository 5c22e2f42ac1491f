// Package httpapi owns hookd's JSON API under /v1/ on --listen: endpoints
// CRUD, the delivery log and attempt timelines, dead letters, replay and
// resend, and the OpenAPI document that describes them (openapi.yaml,
// served at /v1/openapi.yaml). It authenticates bearer tokens (the admin
// token, or an account token created with hookctl tokens create) and
// scopes every read and write to the caller's account: another account's
// resource answers 404, exactly as a missing one. It never delivers
// webhooks itself: replays go through package replay onto the deliveries
// topic like every other delivery.
package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/hookd/hookd/replay"
	"github.com/hookd/hookd/store"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return openAPI }

// Config configures the API.
type Config struct {
	// AdminToken grants access to every account. Empty disables admin
	// access (account tokens keep working). Defaults to "".
	AdminToken string
	// MaxBodyBytes caps a request body; larger bodies answer 413.
	// Defaults to 64 KiB.
	MaxBodyBytes int64
	// MaxListLimit caps the limit parameter of list operations.
	// Defaults to 1000.
	MaxListLimit int
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.MaxListLimit == 0 {
		c.MaxListLimit = 1000
	}
}

// Backend is what the handlers read and write, available once the daemon
// has connected to Postgres and Kafka.
type Backend struct {
	Store *store.Store
	// Replay carries the Kafka options and topic names replays use; its
	// Store is set from Store.
	Replay replay.Deps
}

// Server serves the API. Create it with New, mount it with Routes, and
// Attach the backend when it is ready; until then /v1 answers 503.
type Server struct {
	cfg    Config
	logger *slog.Logger
	admin  [32]byte

	mu      sync.RWMutex
	be      *Backend
	baseCtx context.Context
	runs    sync.WaitGroup
}

// New returns a server for cfg.
func New(cfg Config, logger *slog.Logger) *Server {
	cfg.setDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, logger: logger}
	if cfg.AdminToken != "" {
		s.admin = sha256.Sum256([]byte(cfg.AdminToken))
	}
	return s
}

// Attach makes the backend available. Replays started over HTTP run in
// the background under ctx: they stop (resumably) when it ends.
func (s *Server) Attach(ctx context.Context, be Backend) {
	be.Replay.Store = be.Store
	if be.Replay.Logger == nil {
		be.Replay.Logger = s.logger
	}
	s.mu.Lock()
	s.be, s.baseCtx = &be, ctx
	s.mu.Unlock()
}

// Wait blocks until the background replays have stopped.
func (s *Server) Wait() { s.runs.Wait() }

func (s *Server) backend() (*Backend, context.Context) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.be, s.baseCtx
}

// route is one operation of the API; Routes registers them and the
// OpenAPI test checks the document against them.
type route struct {
	method, path string
	public       bool
	handle       func(s *Server, w http.ResponseWriter, r *http.Request, c caller)
}

var routes = []route{
	{method: "GET", path: "/v1/openapi.yaml", public: true},
	{method: "GET", path: "/v1/endpoints", handle: (*Server).listEndpoints},
	{method: "POST", path: "/v1/endpoints", handle: (*Server).createEndpoint},
	{method: "GET", path: "/v1/endpoints/{id}", handle: (*Server).getEndpoint},
	{method: "PATCH", path: "/v1/endpoints/{id}", handle: (*Server).updateEndpoint},
	{method: "DELETE", path: "/v1/endpoints/{id}", handle: (*Server).deleteEndpoint},
	{method: "GET", path: "/v1/endpoints/{id}/deliveries", handle: (*Server).listDeliveries},
	{method: "POST", path: "/v1/endpoints/{id}/resend", handle: (*Server).resend},
	{method: "GET", path: "/v1/deliveries/{id}", handle: (*Server).getDelivery},
	{method: "GET", path: "/v1/events/{id}/deliveries", handle: (*Server).eventDeliveries},
	{method: "GET", path: "/v1/dead-letters", handle: (*Server).listDeadLetters},
	{method: "POST", path: "/v1/replays", handle: (*Server).createReplay},
	{method: "GET", path: "/v1/replays", handle: (*Server).listReplays},
	{method: "GET", path: "/v1/replays/{id}", handle: (*Server).getReplay},
}

// Routes mounts the API on mux (api.Deps.Routes).
func (s *Server) Routes(mux *http.ServeMux) {
	for _, rt := range routes {
		pattern := rt.method + " " + rt.path
		if rt.public {
			mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/yaml")
				_, _ = w.Write(openAPI)
			})
			continue
		}
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			c, ok := s.authenticate(w, r)
			if !ok {
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
			rt.handle(s, w, r, c)
		})
	}
	// Anything else under /v1/ is a JSON 404, not the mux's text one.
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such API route: "+r.Method+" "+r.URL.Path)
	})
}

// caller is who a request comes from.
type caller struct {
	admin   bool
	account string
}

// owns reports whether the caller may see a resource of account.
func (c caller) owns(account string) bool { return c.admin || c.account == account }

// actor names the caller in audit rows.
func (c caller) actor(given string) string {
	who := "api:admin"
	if !c.admin {
		who = "api:" + c.account
	}
	if given != "" {
		who += "/" + given
	}
	return who
}

func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
	be, _ := s.backend()
	if be == nil {
		writeError(w, http.StatusServiceUnavailable, "starting", "hookd is starting: the API is not connected yet")
		return caller{}, false
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hookd"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "missing bearer token (Authorization: Bearer <token>)")
		return caller{}, false
	}
	if s.cfg.AdminToken != "" {
		h := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(h[:], s.admin[:]) == 1 {
			return caller{admin: true}, true
		}
	}
	account, err := be.Store.AccountForToken(r.Context(), token)
	if errors.Is(err, store.ErrNotFound) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hookd", error="invalid_token"`)
		writeError(w, http.StatusUnauthorized, "unauthorized", "invalid or revoked token")
		return caller{}, false
	}
	if err != nil {
		s.logger.ErrorContext(r.Context(), "checking api token", "error", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "cannot check the token now")
		return caller{}, false
	}
	return caller{account: account}, true
}

// apiError is the body of every error answer.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var e apiError
	e.Error.Code, e.Error.Message = code, msg
	writeJSON(w, status, e)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decode reads a JSON body strictly: unknown fields, trailing data and
// oversize bodies are refused with a message.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
		return false
	}
	writeError(w, http.StatusBadRequest, "invalid_json", "request body: "+err.Error())
	return false
}

func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.ErrorContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	writeError(w, http.StatusInternalServerError, "internal", "internal error; see hookd's log")
}
