package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the API.
func OpenAPI() []byte { return openAPI }

// V1Config configures the API.
type V1Config struct {
	// AdminToken grants access to every account. Empty disables admin
	// access (account tokens keep working). Defaults to "".
	AdminToken string
	// MaxBodyBytes caps a request body; larger bodies answer 413.
	// Defaults to 64 KiB.
	MaxBodyBytes int64
	// MaxListLimit caps the limit parameter of list operations.
	// Defaults to 1000.
	MaxListLimit int
	// AllowPrivateNetworks accepts endpoint URLs whose host is, or
	// resolves to, a private, loopback, link-local, cloud-metadata or other
	// special-purpose address (package ssrf); development only. When false,
	// creating an endpoint with such a URL, or changing its URL to one,
	// answers 400. The dispatcher's dial-time guard has its own switch;
	// hookd --allow-private-networks sets both. Defaults to false.
	AllowPrivateNetworks bool
	// MaxEndpointInFlight is the largest max_in_flight an endpoint may
	// ask for (hookd --max-endpoint-in-flight). At most
	// endpoint.MaxInFlightBound. Defaults to 64.
	MaxEndpointInFlight int
	// MaxTimeout is the longest timeout_ms an endpoint may ask for; set it
	// to the dispatcher's --request-timeout so that no endpoint waits
	// longer than the operator allows. 1ms to endpoint.TimeoutBound.
	// Defaults to 10s (the default --request-timeout).
	MaxTimeout time.Duration
	// MaxReplays caps the replays and resends running in the background
	// of this process, over every account; beyond it a request answers 429
	// too_many_replays. Each running replay holds a Postgres connection at
	// times, so this keeps replays from taking the pool the API needs.
	// Defaults to 8.
	MaxReplays int
	// MaxReplaysPerAccount caps the background replays and resends of one
	// account (the admin token counts as one account); beyond it a request
	// answers 429 too_many_replays. At most MaxReplays. Defaults to 2.
	MaxReplaysPerAccount int
	// PortalBaseURL is the portal's public origin (hookd
	// --portal-base-url, "https://hooks.example.com"): the url of a link
	// from POST /v1/portal-links starts with it. Empty: with the address a
	// request reached, when its Host names that address (the listener's IP
	// and port, or localhost on a loopback listener), and a request with
	// any other Host is refused; never with a Host as sent. Defaults to "".
	PortalBaseURL string
}

// SetDefaults fills the zero fields with their defaults.
func (c *V1Config) SetDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.MaxListLimit == 0 {
		c.MaxListLimit = 1000
	}
	if c.MaxEndpointInFlight == 0 {
		c.MaxEndpointInFlight = 64
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 10 * time.Second
	}
	if c.MaxReplays == 0 {
		c.MaxReplays = 8
	}
	if c.MaxReplaysPerAccount == 0 {
		c.MaxReplaysPerAccount = min(2, c.MaxReplays)
	}
}

// Validate reports a setting out of range, naming it; call it after
// SetDefaults.
func (c *V1Config) Validate() error {
	switch {
	case c.MaxBodyBytes < 1:
		return fmt.Errorf("api max body bytes: must be at least 1, got %d", c.MaxBodyBytes)
	case c.MaxListLimit < 1:
		return fmt.Errorf("api max list limit: must be at least 1, got %d", c.MaxListLimit)
	case c.MaxEndpointInFlight < 1 || c.MaxEndpointInFlight > endpoint.MaxInFlightBound:
		return fmt.Errorf("max endpoint in-flight: must be 1..%d, got %d", endpoint.MaxInFlightBound, c.MaxEndpointInFlight)
	case c.MaxTimeout < time.Millisecond || c.MaxTimeout > endpoint.TimeoutBound:
		return fmt.Errorf("api max endpoint timeout: must be 1ms..%s, got %s", endpoint.TimeoutBound, c.MaxTimeout)
	case c.MaxReplays < 1:
		return fmt.Errorf("api max replays: must be at least 1, got %d", c.MaxReplays)
	case c.MaxReplaysPerAccount < 1 || c.MaxReplaysPerAccount > c.MaxReplays:
		return fmt.Errorf("api max replays per account: must be 1..%d (max replays), got %d", c.MaxReplays, c.MaxReplaysPerAccount)
	case c.PortalBaseURL != "" && !isOrigin(c.PortalBaseURL):
		return fmt.Errorf("portal base url: must be an http or https origin such as https://hooks.example.com, got %q", c.PortalBaseURL)
	}
	return nil
}

// isOrigin reports whether s is scheme://host[:port] with an optional "/".
func isOrigin(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		(u.Path == "" || u.Path == "/") && u.RawQuery == "" && u.Fragment == "" && !u.ForceQuery
}

// Backend is what the handlers read and write, available once the daemon
// has connected to Postgres and Kafka.
type Backend struct {
	Store *store.Store
	// Replay carries the Kafka options and topic names replays use; its
	// Store is set from Store.
	Replay replay.Deps
}

// V1 serves the API. Create it with NewV1, mount it with Routes, and
// Attach the backend when it is ready; until then /v1 answers 503.
type V1 struct {
	cfg    V1Config
	logger *slog.Logger
	admin  [32]byte
	// resolver looks up endpoint hosts for the SSRF check (tests replace
	// it).
	resolver ssrf.Resolver

	mu      sync.RWMutex
	be      *Backend
	baseCtx context.Context
	runs    sync.WaitGroup
	// replays counts the background replays running, per account.
	replays replaySlots
}

// NewV1 returns a server for cfg, with the defaults filled in; check cfg
// with Validate first.
func NewV1(cfg V1Config, logger *slog.Logger) *V1 {
	cfg.SetDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &V1{cfg: cfg, logger: logger, resolver: net.DefaultResolver}
	if cfg.AdminToken != "" {
		s.admin = sha256.Sum256([]byte(cfg.AdminToken))
	}
	return s
}

// Attach makes the backend available. Replays started over HTTP run in
// the background under ctx: they stop (resumably) when it ends.
func (s *V1) Attach(ctx context.Context, be Backend) {
	be.Replay.Store = be.Store
	if be.Replay.Logger == nil {
		be.Replay.Logger = s.logger
	}
	s.mu.Lock()
	s.be, s.baseCtx = &be, ctx
	s.mu.Unlock()
}

// Wait blocks until the background replays have stopped.
func (s *V1) Wait() { s.runs.Wait() }

func (s *V1) backend() (*Backend, context.Context) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.be, s.baseCtx
}

// route is one operation of the API; Routes registers them and the
// OpenAPI test checks the document against them.
type route struct {
	method, path string
	public       bool
	handle       func(s *V1, w http.ResponseWriter, r *http.Request, c caller)
}

var routes = []route{
	{method: "GET", path: "/v1/openapi.yaml", public: true},
	{method: "GET", path: "/v1/endpoints", handle: (*V1).listEndpoints},
	{method: "POST", path: "/v1/endpoints", handle: (*V1).createEndpoint},
	{method: "GET", path: "/v1/endpoints/{id}", handle: (*V1).getEndpoint},
	{method: "PATCH", path: "/v1/endpoints/{id}", handle: (*V1).updateEndpoint},
	{method: "DELETE", path: "/v1/endpoints/{id}", handle: (*V1).deleteEndpoint},
	{method: "GET", path: "/v1/endpoints/{id}/deliveries", handle: (*V1).listDeliveries},
	{method: "POST", path: "/v1/endpoints/{id}/resend", handle: (*V1).resend},
	{method: "GET", path: "/v1/deliveries/{id}", handle: (*V1).getDelivery},
	{method: "GET", path: "/v1/deliveries/{id}/payload", handle: (*V1).deliveryPayload},
	{method: "POST", path: "/v1/deliveries/{id}/resend", handle: (*V1).resendDelivery},
	{method: "GET", path: "/v1/events/{id}/deliveries", handle: (*V1).eventDeliveries},
	{method: "GET", path: "/v1/dead-letters", handle: (*V1).listDeadLetters},
	{method: "POST", path: "/v1/replays", handle: (*V1).createReplay},
	{method: "GET", path: "/v1/replays", handle: (*V1).listReplays},
	{method: "GET", path: "/v1/replays/{id}", handle: (*V1).getReplay},
	{method: "POST", path: "/v1/portal-links", handle: (*V1).createPortalLink},
	{method: "GET", path: "/v1/event-types", handle: (*V1).listEventTypes},
	{method: "POST", path: "/v1/event-types", handle: (*V1).createEventType},
	{method: "GET", path: "/v1/event-types/{id}", handle: (*V1).getEventType},
	{method: "PATCH", path: "/v1/event-types/{id}", handle: (*V1).updateEventType},
	{method: "DELETE", path: "/v1/event-types/{id}", handle: (*V1).deleteEventType},
}

// Routes mounts the API on mux (api.Deps.Routes).
func (s *V1) Routes(mux *http.ServeMux) {
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
			// Answers are one caller's, and some carry a secret shown once
			// (an endpoint's signing secret, a portal link's token): no
			// browser, proxy or CDN may keep a copy.
			w.Header().Set("Cache-Control", "no-store")
			c, ok := s.authenticate(w, r)
			if !ok || !checkRequestText(w, r) {
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

func (s *V1) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
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

// checkRequestText refuses what no resource id or filter can hold before
// a handler sees it (and before it reaches Postgres, which refuses NUL and
// invalid UTF-8 in text): an {id} path value that is not 1..255 printable
// ASCII characters answers 404, as a missing resource does, and a query
// parameter with invalid UTF-8 or a control character answers 400.
func checkRequestText(w http.ResponseWriter, r *http.Request) bool {
	if id := r.PathValue("id"); id != "" && endpoint.ValidateID(id) != nil {
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%q not found: ids are 1..%d printable ASCII characters", clip(id), endpoint.MaxAccountLen))
		return false
	}
	for name, values := range r.URL.Query() {
		for _, v := range values {
			if err := plainText(v); err != "" {
				writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%s: %s", clip(name), err))
				return false
			}
		}
	}
	return true
}

// plainText returns what is wrong with s as a string value, or "".
func plainText(s string) string {
	if !utf8.ValidString(s) {
		return "not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return fmt.Sprintf("must not contain NUL or other control characters (found %U)", r)
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) <= 100 {
		return s
	}
	return s[:100] + "..."
}

// decode reads a JSON body strictly: an empty body, invalid JSON, a value
// of the wrong type, an unknown field and trailing data are refused with a
// 400 invalid_json naming the field, a string with a NUL or control
// character with a 400 invalid naming it, an oversize body with a 413.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil && (len(raw) == 0 || raw[0] != '{') {
		// json.Decode takes null for an empty object.
		err = &json.UnmarshalTypeError{Value: clip(string(raw)), Type: reflect.TypeOf(v)}
	}
	if err == nil {
		inner := json.NewDecoder(bytes.NewReader(raw))
		inner.DisallowUnknownFields()
		err = inner.Decode(v)
	}
	if err == nil {
		var tooBig *http.MaxBytesError
		switch _, terr := dec.Token(); {
		case errors.As(terr, &tooBig):
			err = terr
		case !errors.Is(terr, io.EOF):
			err = errTrailing
		}
	}
	if err == nil {
		err = checkStrings(reflect.ValueOf(v), "")
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
		return false
	}
	var fieldErr *fieldError
	if errors.As(err, &fieldErr) {
		writeError(w, http.StatusBadRequest, "invalid", fieldErr.Error())
		return false
	}
	writeError(w, http.StatusBadRequest, "invalid_json", decodeMessage(err))
	return false
}

var errTrailing = errors.New("request body: trailing data after the JSON object")

// decodeMessage names the field of a decoding error.
func decodeMessage(err error) string {
	var (
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	switch {
	case errors.Is(err, io.EOF):
		return "request body: empty; expected a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "request body: truncated JSON"
	case errors.As(err, &syntaxErr):
		return fmt.Sprintf("request body: invalid JSON at byte %d: %s", syntaxErr.Offset, syntaxErr.Error())
	case errors.As(err, &typeErr) && typeErr.Field == "":
		return "request body: must be a JSON object, got " + typeErr.Value
	case errors.As(err, &typeErr):
		return fmt.Sprintf("%s: must be %s, got %s", typeErr.Field, jsonKind(typeErr.Type), clip(typeErr.Value))
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
		return clip(strings.Trim(name, `"`)) + ": unknown field"
	}
	if errors.Is(err, errTrailing) {
		return err.Error()
	}
	return "request body: " + clip(msg)
}

// jsonKind names the JSON a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(jsonKind(t.Elem()), "a "), "an ") + "s"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "an object"
}

// fieldError is a bad value in a decoded body.
type fieldError struct{ field, problem string }

func (e *fieldError) Error() string { return e.field + ": " + e.problem }

// checkStrings walks a decoded body and refuses a string holding what no
// text column can (NUL) or what has no place in an API value (other control
// characters), naming its JSON field.
func checkStrings(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return checkStrings(v.Elem(), path)
		}
	case reflect.String:
		if problem := plainText(v.String()); problem != "" {
			return &fieldError{field: path, problem: problem}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := checkStrings(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			if path != "" {
				name = path + "." + name
			}
			if err := checkStrings(v.Field(i), name); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *V1) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.logger.ErrorContext(r.Context(), "api request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	writeError(w, http.StatusInternalServerError, "internal", "internal error; see hookd's log")
}
