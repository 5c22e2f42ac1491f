package dispatcher

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hookd/hookd/dispatcher/signature"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/delivery"
)

// sender makes the HTTP request of one attempt.
type sender struct {
	client *http.Client
	// certs are the Transports of endpoints with a client certificate.
	certs      certTransports
	prepared   preparedCache
	timestamps timestampCache
	userAgent  []string // the header value, shared by every request
	readLimit  int64
	excerpt    int
	// log, when set, gets one line per attempt at logLevel.
	log      *slog.Logger
	logLevel slog.Level
}

// response is what came back from one request.
type response struct {
	status     int
	retryAfter string
	excerpt    string
	err        error
}

func newSender(cfg Config) *sender {
	guard := ssrf.Guard{AllowPrivate: cfg.AllowPrivateNetworks}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second, Control: guard.Control}
	dial := dialer.DialContext
	if cfg.EgressProxy != nil {
		// Through the proxy: the guard checks the destination's resolved
		// addresses instead of the dialled one (the proxy's).
		cd := &connectDialer{proxy: cfg.EgressProxy, guard: guard, resolver: net.DefaultResolver,
			dialer: &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}, timeout: cfg.ConnectTimeout}
		if cfg.resolver != nil {
			cd.resolver = cfg.resolver
		}
		dial = cd.DialContext
	}
	return &sender{
		client: &http.Client{
			Transport: newTransport(cfg, dial),
			// Redirects are never followed: a 3xx is a failed attempt.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		certs:     certTransports{newTransport: func() *http.Transport { return newTransport(cfg, dial) }},
		userAgent: []string{cfg.UserAgent},
		readLimit: cfg.ResponseReadLimit,
		excerpt:   cfg.ResponseExcerpt,
	}
}

// closeIdle closes the idle connections.
func (s *sender) closeIdle() {
	s.client.CloseIdleConnections()
	s.certs.closeIdle()
}

// logging makes send log one line per attempt on log: at info when
// atInfo (--log-deliveries), else at debug (seen with --log-level debug).
func (s *sender) logging(log *slog.Logger, atInfo bool) *sender {
	s.log, s.logLevel = log, slog.LevelDebug
	if atInfo {
		s.logLevel = slog.LevelInfo
	}
	return s
}

// send POSTs d's body, unchanged, to t, signed with every secret of t.
// timeout bounds the whole exchange, reading the response included.
func (s *sender) send(ctx context.Context, t Target, d *delivery.Delivery, timeout time.Duration) response {
	if s.log == nil || !s.log.Enabled(ctx, s.logLevel) {
		return s.post(ctx, t, d, timeout)
	}
	start := time.Now()
	res := s.post(ctx, t, d, timeout)
	attrs := []slog.Attr{slog.String("endpoint_id", t.ID), slog.String("event_id", d.EventID),
		slog.String("delivery_id", d.ID), slog.Int("status", res.status),
		slog.Int64("duration_ms", time.Since(start).Milliseconds())}
	if res.err != nil {
		attrs = append(attrs, slog.String("error", res.err.Error()))
	}
	s.log.LogAttrs(ctx, s.logLevel, "delivery attempt", attrs...)
	return res
}

// post makes the request of send.
func (s *sender) post(ctx context.Context, t Target, d *delivery.Delivery, timeout time.Duration) response {
	p := s.prepared.get(t)
	if p.err != nil {
		return response{err: p.err}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The URL was parsed once for the endpoint: the request gets a copy,
	// not a parse of its own.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "", bytes.NewReader(d.Body))
	if err != nil {
		return response{err: fmt.Errorf("%w: %v", ErrInvalidURL, err)}
	}
	u := *p.url
	req.URL = &u
	ts := s.timestamps.get(time.Now()) // receivers check it against their wall clock
	// One backing array for the three values of this request.
	vals := [...]string{d.EventID, ts, p.signer.Sign(d.EventID, ts, d.Body)}
	v := vals[:]
	h := make(http.Header, 5+len(p.headers)) // one allocation, custom headers included
	h["Webhook-Id"], h["Webhook-Timestamp"], h["Webhook-Signature"] = v[0:1:1], v[1:2:2], v[2:3:3]
	h["Content-Type"], h["User-Agent"] = contentTypeJSON, s.userAgent
	if t.SendTraceparent {
		setTraceparent(ctx, h) // trace.go
	}
	for _, c := range p.headers {
		if _, set := h[c.name]; !set { // never over hookd's own
			h[c.name] = c.value
		}
	}
	req.Header = h
	// The transport itself, not the client: redirects are never followed,
	// so the client's redirect bookkeeping (a copy of every request's
	// headers) is work for nothing. Errors are wrapped as the client does.
	rt := s.client.Transport
	if p.cert != nil {
		rt = s.certs.get(p.certID, p.cert)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return response{err: &url.Error{Op: "Post", URL: p.url.Redacted(), Err: err}}
	}
	defer resp.Body.Close()
	out := response{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.ContentLength == 0 {
		return out // no body to read or keep
	}
	// Read up to the limit so a short body leaves the connection reusable;
	// a longer one is abandoned and Close drops its connection.
	var buf bytes.Buffer
	// The status is the receiver's answer: a body cut short by the deadline
	// or the connection does not change it.
	_, _ = io.Copy(&buf, io.LimitReader(resp.Body, s.readLimit))
	out.excerpt = excerpt(buf.Bytes(), s.excerpt)
	return out
}

// timestampCache holds the webhook-timestamp value of the latest second
// asked for: one string a second instead of one a request.
type timestampCache struct{ last atomic.Pointer[timestamp] }

type timestamp struct {
	sec int64
	s   string
}

// get returns signature.Timestamp(now).
func (c *timestampCache) get(now time.Time) string {
	sec := now.Unix()
	if t := c.last.Load(); t != nil && t.sec == sec {
		return t.s
	}
	t := &timestamp{sec: sec, s: signature.Timestamp(now)}
	c.last.Store(t)
	return t.s
}

// contentTypeJSON is the Content-Type of every request. Header values are
// only read by the transport, so every request shares the slice.
var contentTypeJSON = []string{"application/json"}

// prepared is what a request to an endpoint needs that depends on the
// endpoint alone, worked out once: its URL parsed and checked, its
// secrets decoded into a Signer, its custom headers in wire form. err is
// set (and cached as well) when the URL or a secret cannot be used.
type prepared struct {
	rawURL  string
	secrets []string
	url     *url.URL
	signer  *signature.Signer
	// headers are t.Headers with canonical names and shared value slices,
	// read by the transport only.
	headers []customHeader
	raw     map[string]string // t.Headers, for matches
	// cert is t's client certificate, nil when none; certID keys its
	// Transport.
	cert                *tls.Certificate
	certID              [32]byte
	certPEM, certKeyPEM string // for matches
	err                 error
}

type customHeader struct {
	name  string
	value []string
}

func prepare(t Target) *prepared {
	p := &prepared{rawURL: t.URL, secrets: t.Secrets, raw: t.Headers}
	for name, v := range t.Headers {
		p.headers = append(p.headers, customHeader{name: textproto.CanonicalMIMEHeaderKey(name), value: []string{v}})
	}
	u, err := url.Parse(t.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.err = fmt.Errorf("%w: %q", ErrInvalidURL, t.URL)
		return p
	}
	// whsec_ secrets sign v1, whsk_ ed25519 keys v1a; every key signs.
	keys, err := signature.ParseKeys(t.Secrets)
	if err != nil || len(keys) == 0 {
		p.err = fmt.Errorf("%w: %v", ErrInvalidSecret, err)
		return p
	}
	p.url, p.signer = u, signature.NewKeySigner(keys)
	if t.ClientCert != "" {
		p.certPEM, p.certKeyPEM = t.ClientCert, t.ClientKey
		cert, err := tls.X509KeyPair([]byte(t.ClientCert), []byte(t.ClientKey))
		if err != nil {
			// The API and the store refuse such a pair. Its credentials
			// unusable, the endpoint is treated as with an unusable secret
			// (class invalid_secret): a request without the certificate
			// would only be refused by the receiver.
			p.err = fmt.Errorf("%w: client certificate: %v", ErrInvalidSecret, err)
			return p
		}
		p.cert, p.certID = &cert, clientCertID(t.ClientCert, t.ClientKey)
	}
	return p
}

// matches reports whether p was prepared from t's URL, secrets and headers.
func (p *prepared) matches(t Target) bool {
	return p.rawURL == t.URL && slices.Equal(p.secrets, t.Secrets) && maps.Equal(p.raw, t.Headers) &&
		p.certPEM == t.ClientCert && p.certKeyPEM == t.ClientKey
}

// preparedRotate is how often the prepared endpoints are aged: one unused
// for between one and two of these (and preparedCheckEvery lookups) is
// forgotten.
const preparedRotate = 10 * time.Minute

// preparedCache holds the prepared state of the endpoints requested
// recently, in two generations: a lookup moves an entry to the current
// one, and every preparedRotate the previous generation is dropped, so
// memory follows the endpoints in use, not every endpoint ever seen. An
// endpoint whose URL, secrets or headers changed is prepared again at its
// next request.
type preparedCache struct {
	mu       sync.Mutex
	cur, old map[string]*prepared
	rotated  time.Time
	gets     uint // lookups; the clock is read every preparedCheckEvery
}

// preparedCheckEvery is how many lookups go by between two readings of
// the clock for the rotation.
const preparedCheckEvery = 1024

func (c *preparedCache) get(t Target) *prepared {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets++
	if c.cur == nil || c.gets%preparedCheckEvery == 0 {
		if now := time.Now(); c.cur == nil || now.Sub(c.rotated) >= preparedRotate {
			c.old, c.cur, c.rotated = c.cur, map[string]*prepared{}, now
		}
	}
	p := c.cur[t.ID]
	if p != nil && p.matches(t) {
		return p // the common case: no write to the map
	}
	if p == nil {
		p = c.old[t.ID]
	}
	if p == nil || !p.matches(t) {
		p = prepare(t)
	}
	c.cur[t.ID] = p
	return p
}

// excerpt returns at most n bytes of b as text Postgres accepts: valid
// UTF-8 without NUL bytes.
func excerpt(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
		// Do not cut a multi-byte character in two.
		for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	return strings.ReplaceAll(strings.ToValidUTF8(string(b), "\uFFFD"), "\x00", "")
}
