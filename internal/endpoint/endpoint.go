// Package endpoint owns the endpoint model (where deliveries go and which
// event types they subscribe to), the subscription matching rules, the
// generation of endpoint ids and signing secrets, and the in-memory Index
// that the router and the dispatcher read on their hot paths. The Index is
// refreshed by Postgres LISTEN/NOTIFY through a Source; this package never
// runs SQL itself, never queries per event, and never sends HTTP.
//
// Internal: only hookd's own packages can import it.
package endpoint

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"

	"github.com/hookd/hookd/internal/endpoint/filter"
)

// Status is an endpoint's lifecycle state.
type Status string

// Statuses, as stored in webhooks.endpoints.status.
const (
	StatusActive   Status = "active"
	StatusDisabled Status = "disabled"
)

// Endpoint is one row of webhooks.endpoints. Values handed out by the Index
// are shared and must be treated as read-only.
type Endpoint struct {
	ID          string `json:"id"`
	Account     string `json:"account"`
	URL         string `json:"url"`
	Description string `json:"description"`
	// Secrets are the signing keys, current first; several while a
	// rotation is in progress: whsec_ shared secrets (v1 signatures) and
	// whsk_ ed25519 private keys (v1a), in any mix; every one signs.
	Secrets []string `json:"secrets"`
	// EventTypes are the subscribed event types; empty means all. A "*"
	// matches any run of characters, dots included ("invoice.*").
	EventTypes []string `json:"event_types"`
	Status     Status   `json:"status"`
	// MaxInFlight, Timeout and RatePerSec are per-endpoint limits; zero
	// means the dispatcher's default.
	MaxInFlight    int           `json:"max_in_flight,omitempty"`
	Timeout        time.Duration `json:"timeout_ns,omitempty"`
	RatePerSec     float64       `json:"rate_per_sec,omitempty"`
	FailingSince   time.Time     `json:"failing_since,omitzero"`
	DisabledReason string        `json:"disabled_reason,omitempty"`
	DisabledAt     time.Time     `json:"disabled_at,omitzero"`
	CreatedAt      time.Time     `json:"created_at,omitzero"`
	UpdatedAt      time.Time     `json:"updated_at,omitzero"`

	// Headers are custom headers sent with every request, name to value;
	// nil when none. See ValidateHeaders for what is refused.
	Headers map[string]string `json:"headers,omitempty"`

	// Filter is the payload filter (package filter) an event must match to
	// be delivered here, on top of EventTypes; nil when none. The Index
	// compiles it once per load (Accepts).
	Filter json.RawMessage `json:"filter,omitempty"`
	// filter is Filter compiled; set by the Index, nil when none.
	filter *filter.Filter

	// ClientCert and ClientKey are the PEM client certificate (chain) and
	// key presented when the endpoint's receiver asks for one (mutual
	// TLS); both empty when none. The key is encrypted at rest like the
	// secrets and never shown (hence no JSON name).
	ClientCert string `json:"client_cert,omitempty"`
	ClientKey  string `json:"-"`
	// SendTraceparent sends the W3C traceparent header of each attempt's
	// span with its request, when hookd's tracing is on.
	SendTraceparent bool `json:"send_traceparent,omitempty"`

	// Ordering is OrderingFIFO for deliveries one at a time, in order;
	// "" or OrderingNone (the default) otherwise.
	Ordering Ordering `json:"ordering,omitempty"`
}

// Active reports whether the endpoint receives new deliveries.
func (e *Endpoint) Active() bool { return e.Status == StatusActive }

// OpsTypePrefix starts the type of hookd's own operational events
// (hookd.endpoint.failing, hookd.delivery.dead_lettered, ...). An endpoint
// receives them only when it subscribes to them by name: a pattern that
// itself starts with "hookd." ("hookd.*", "hookd.endpoint.failing").
const OpsTypePrefix = "hookd."

// Subscribes reports whether the endpoint's event-type filter accepts
// eventType. It ignores the status. An empty filter accepts every type
// except hookd's operational events; see SubscriptionMatches.
func (e *Endpoint) Subscribes(eventType string) bool {
	if len(e.EventTypes) == 0 {
		return !strings.HasPrefix(eventType, OpsTypePrefix)
	}
	for _, p := range e.EventTypes {
		if SubscriptionMatches(p, eventType) {
			return true
		}
	}
	return false
}

// SubscriptionMatches is the subscription rule: MatchType, except that a
// "hookd." type (an operational event) is matched only by a pattern that
// starts with "hookd." too, so "*" or "*.failing" never subscribe an
// endpoint to hookd's alerts by accident. Filters over stored deliveries
// (dead-letter replay) use MatchType.
func SubscriptionMatches(pattern, eventType string) bool {
	if strings.HasPrefix(eventType, OpsTypePrefix) && !strings.HasPrefix(pattern, OpsTypePrefix) {
		return false
	}
	return MatchType(pattern, eventType)
}

// MatchType reports whether the event type t matches pattern, where "*"
// matches any run of characters (possibly empty, dots included) and every
// other character matches itself. "*" alone matches every type;
// "invoice.*" matches "invoice.paid" and "invoice.payment.failed" but not
// "invoice"; "*.created" matches "customer.created".
func MatchType(pattern, t string) bool {
	// Iterative wildcard matching with single-star backtracking: linear in
	// practice, never exponential.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(t) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, s
			p++
		case p < len(pattern) && pattern[p] == t[s]:
			p++
			s++
		case star >= 0:
			p = star + 1
			mark++
			s = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Limits on user-supplied fields.
const (
	MaxAccountLen     = 255
	MaxTypeLen        = 255
	MaxURLLen         = 2048
	MaxEventTypes     = 100
	MaxSecrets        = 10
	MaxDescriptionLen = 1024
	minSecretBytes    = 24
	maxSecretBytes    = 64
	secretPrefix      = "whsec_"
	idPrefix          = "ep_"
)

// Bounds of the per-endpoint limits: what the store can hold (Postgres
// integer columns, the timeout in milliseconds) and what a dispatcher can
// use. Operators set lower ceilings on what accounts may ask for (hookd
// --max-endpoint-in-flight, --request-timeout); these bound every path,
// hookctl included.
const (
	MaxInFlightBound = math.MaxInt32
	TimeoutBound     = time.Duration(math.MaxInt32) * time.Millisecond // about 24.8 days
	RatePerSecBound  = 1e6
)

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid endpoint")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// NewID returns a fresh endpoint id: "ep_" and 26 lowercase base32
// characters (128 random bits).
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return idPrefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// NewSecret returns a fresh Standard Webhooks signing secret: "whsec_" and
// the base64 of 32 random bytes.
func NewSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return secretPrefix + base64.StdEncoding.EncodeToString(b[:])
}

// SecretKey decodes a "whsec_<base64>" secret into its HMAC key.
func SecretKey(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, invalid("secret must start with %q", secretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, invalid("secret: the part after %q is not standard base64", secretPrefix)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, invalid("secret: must decode to %d..%d bytes, got %d", minSecretBytes, maxSecretBytes, len(key))
	}
	return key, nil
}

// ValidateID checks an endpoint id given by an operator: 1..255 printable
// ASCII characters without spaces (it travels as a Kafka key and header).
func ValidateID(id string) error {
	if !printableToken(id, MaxAccountLen) {
		return invalid("id %q: must be 1..%d printable ASCII characters without spaces", clip(id), MaxAccountLen)
	}
	return nil
}

// ValidateAccount checks an account name: 1..255 printable ASCII characters
// without spaces.
func ValidateAccount(account string) error {
	if !printableToken(account, MaxAccountLen) {
		return invalid("account %q: must be 1..%d printable ASCII characters without spaces", clip(account), MaxAccountLen)
	}
	return nil
}

// ValidatePattern checks one event-type pattern (an endpoint's
// subscription, a dead-letter filter): 1..255 characters, dot-separated
// words of letters, digits, '_' and '-', with '*' wildcards; no empty word,
// so "invoice..paid", "invoice." and "in voice" are refused. The API,
// hookctl and the store all use this rule.
func ValidatePattern(p string) error {
	if p == "" || len(p) > MaxTypeLen {
		return invalid("event_types: %q must be 1..%d characters", clip(p), MaxTypeLen)
	}
	for _, seg := range strings.Split(p, ".") {
		if seg == "" {
			return invalid("event_types: %q has an empty segment between dots", clip(p))
		}
		for i := 0; i < len(seg); i++ {
			if c := seg[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '*') {
				return invalid("event_types: %q: only letters, digits, '_', '-', '*' and '.' are allowed", clip(p))
			}
		}
	}
	return nil
}

// ValidateURL checks an endpoint URL's syntax: 1..2048 bytes of valid
// UTF-8, absolute http or https, a host, no credentials, an international
// host name that IDNA maps to ASCII, and no numeric host that is not a
// canonical IP address ("127.1", "2130706433", "0x7f.0.0.1": resolvers
// disagree on what those mean), judged on the host as NormalizeURL writes
// it. Whether the host may be a private address is decided by the caller
// (ssrf.CheckURL, on the normalised URL) and, at send time, by the
// dispatcher's dial-time guard.
func ValidateURL(raw string) error {
	_, err := NormalizeURL(raw)
	return err
}

// NormalizeURL checks raw as ValidateURL does and returns it with its host
// name in the ASCII form a client dials: net/http maps a non-ASCII host
// through IDNA's lookup profile (UTS #46) before it resolves it, which
// turns ideographic and full-width dots into '.', full-width and circled
// digits into ASCII digits, and other names into punycode. So
// "http://①②⑦.⓪.⓪.①/" is "http://127.0.0.1/", and an address check that
// judged the URL as written would wave through a loopback address. A URL
// whose host is already ASCII is returned unchanged.
func NormalizeURL(raw string) (string, error) {
	if raw == "" || len(raw) > MaxURLLen {
		return "", invalid("url: must be 1..%d bytes, got %d", MaxURLLen, len(raw))
	}
	if !utf8.ValidString(raw) {
		return "", invalid("url %q: not valid UTF-8", clip(raw))
	}
	if strings.ContainsFunc(raw, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		// url.Parse lets some through (in a fragment); no column takes NUL.
		return "", invalid("url %q: must not contain control characters", clip(raw))
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", invalid("url %q: %v", clip(raw), errors.Unwrap(err))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", invalid("url %q: scheme must be http or https", clip(raw))
	}
	if u.Host == "" || u.Hostname() == "" {
		return "", invalid("url %q: has no host", clip(raw))
	}
	if u.User != nil {
		return "", invalid("url %q: must not carry credentials", clip(raw))
	}
	host, err := asciiHost(u.Hostname())
	if err != nil {
		return "", invalid("url %q: %v", clip(raw), err)
	}
	if numericHost(host) {
		return "", invalid("url %q: host %q is numeric but not an IP address (write IPv4 as four decimal numbers, IPv6 in brackets)", clip(raw), clip(host))
	}
	if host == u.Hostname() {
		return raw, nil
	}
	if port := u.Port(); port != "" {
		u.Host = host + ":" + port
	} else {
		u.Host = host
	}
	return u.String(), nil
}

// asciiHost maps a non-ASCII host name to ASCII as net/http does before it
// dials (idna.Lookup); an ASCII host is returned as is.
func asciiHost(host string) (string, error) {
	ascii := true
	for i := 0; i < len(host); i++ {
		if host[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return host, nil
	}
	out, err := idna.Lookup.ToASCII(host)
	if err != nil {
		return "", fmt.Errorf("host %q is not a valid international domain name: %v", clip(host), strings.TrimPrefix(err.Error(), "idna: "))
	}
	if strings.Trim(out, ".") == "" || strings.ContainsAny(out, ":/?#[]@%") {
		return "", fmt.Errorf("host %q is not a valid domain name", clip(host))
	}
	return out, nil
}

// numericHost reports a host that is not an IP address but whose last
// label is a number (decimal, octal or 0x hex): no DNS name is (top-level
// domains are never all-numeric), and resolvers read such hosts as IPv4 in
// inconsistent ways.
func numericHost(host string) bool {
	if _, err := netip.ParseAddr(host); err == nil {
		return false
	}
	last := strings.TrimSuffix(host, ".")
	if i := strings.LastIndexByte(last, '.'); i >= 0 {
		last = last[i+1:]
	}
	if last == "" {
		return false
	}
	if _, err := strconv.ParseUint(last, 0, 64); err == nil {
		// Go's own reading of a number ("0b101", "0o17", "1_0") counts too.
		return true
	}
	digits := strings.TrimPrefix(strings.TrimPrefix(strings.ToLower(last), "0x"), "0X")
	hex := len(digits) < len(last)
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if !(c >= '0' && c <= '9' || hex && c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// validText checks free text (description, disabled reason): at most max
// bytes of valid UTF-8 without NUL or other control characters but tab,
// line feed and carriage return.
func validText(field, s string, max int) error {
	if len(s) > max {
		return invalid("%s: at most %d bytes, got %d", field, max, len(s))
	}
	if !utf8.ValidString(s) {
		return invalid("%s: not valid UTF-8", field)
	}
	for _, r := range s {
		if unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r' {
			return invalid("%s: must not contain NUL or other control characters (found %U)", field, r)
		}
	}
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) <= 100 {
		return s
	}
	return s[:100] + "..."
}

// Validate checks every field an operator or an account can set, within
// the bounds the store can hold: a valid endpoint never makes the store
// fail. Messages name the field as the API does.
func (e *Endpoint) Validate() error {
	if err := ValidateID(e.ID); err != nil {
		return err
	}
	if err := ValidateAccount(e.Account); err != nil {
		return err
	}
	if err := ValidateURL(e.URL); err != nil {
		return err
	}
	if err := validText("description", e.Description, MaxDescriptionLen); err != nil {
		return err
	}
	if err := validText("disabled_reason", e.DisabledReason, MaxDescriptionLen); err != nil {
		return err
	}
	if err := e.validateSecrets(); err != nil {
		return err
	}
	if len(e.EventTypes) > MaxEventTypes {
		return invalid("event_types: at most %d, got %d", MaxEventTypes, len(e.EventTypes))
	}
	for _, p := range e.EventTypes {
		if err := ValidatePattern(p); err != nil {
			return err
		}
	}
	if err := ValidateHeaders(e.Headers); err != nil {
		return err
	}
	if _, err := ParseFilter(e.Filter); err != nil {
		return err
	}
	// Expiry is judged when the certificate is given (the API, hookctl),
	// not here: an endpoint whose certificate expired stays editable.
	if _, err := ParseClientCert(e.ClientCert, e.ClientKey, time.Time{}); err != nil {
		return err
	}
	if err := ValidateOrdering(e.Ordering); err != nil {
		return err
	}
	switch e.Status {
	case StatusActive, StatusDisabled:
	default:
		return invalid("status %q: must be active or disabled", clip(string(e.Status)))
	}
	return e.validateLimits()
}

func (e *Endpoint) validateSecrets() error {
	if len(e.Secrets) == 0 || len(e.Secrets) > MaxSecrets {
		return invalid("secrets: must hold 1..%d secrets, got %d", MaxSecrets, len(e.Secrets))
	}
	for _, s := range e.Secrets {
		if err := validateKey(s); err != nil {
			return err
		}
	}
	return nil
}

func (e *Endpoint) validateLimits() error {
	switch {
	case e.MaxInFlight < 0 || e.MaxInFlight > MaxInFlightBound:
		return invalid("max_in_flight: must be 0 (the default) to %d, got %d", MaxInFlightBound, e.MaxInFlight)
	case e.Timeout < 0 || (e.Timeout > 0 && e.Timeout < time.Millisecond) || e.Timeout > TimeoutBound:
		return invalid("timeout: must be 0 (the default) or 1ms to %s, got %s", TimeoutBound, e.Timeout)
	case math.IsNaN(e.RatePerSec) || e.RatePerSec < 0 || e.RatePerSec > RatePerSecBound:
		return invalid("rate_per_sec: must be 0 (unlimited) to %g, got %g", RatePerSecBound, e.RatePerSec)
	}
	return nil
}

func printableToken(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}
