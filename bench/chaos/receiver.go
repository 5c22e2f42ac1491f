package chaos

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Behavior is how a receiver endpoint answers.
type Behavior string

// Behaviors. Each misbehaves for an endpoint's first FailAttempts requests
// of a webhook-id (all of them when FailAttempts < 0), then answers 200.
const (
	BehaveOK         Behavior = "ok"                // 200 at once
	BehaveHang       Behavior = "hang"              // never answers (until the client gives up)
	BehaveReset      Behavior = "reset"             // resets the connection (RST) without an answer
	BehaveSlowBytes  Behavior = "slow_bytes"        // 200, status line, headers and body written byte by byte
	Behave5xx        Behavior = "5xx"               // 503 (a storm while misbehaving)
	Behave429        Behavior = "429"               // 429 with Retry-After: 1
	BehaveRedirMeta  Behavior = "redirect_metadata" // 302 to http://169.254.169.254/... (must not be followed)
	BehaveRedirLocal Behavior = "redirect_loopback" // 302 to this receiver's /trap (must not be followed)
	BehaveHugeBody   Behavior = "huge_body"         // 200 with a 32 MiB body
	BehaveEndless    Behavior = "endless_body"      // 200 with a body that never ends
	BehaveFlaky      Behavior = "flaky"             // 500 for a hash-chosen share of webhook-ids on their first attempt
)

// EndpointSpec is one receiver endpoint.
type EndpointSpec struct {
	ID     string
	Secret string // whsec_...
	Behave Behavior
	// FailAttempts is how many requests of each webhook-id misbehave before
	// a 200; negative means always.
	FailAttempts int
	// FailEvery, when above 1, limits the misbehaviour to the webhook-ids
	// whose hash is a multiple of it (one in FailEvery ids).
	FailEvery int
	// Latency is added before every 200 (benchmark receivers).
	Latency time.Duration
}

// Request is one request a receiver got.
type Request struct {
	EndpointID string
	WebhookID  string
	At         time.Time
	// Status is what the receiver answered; 0 when it answered nothing
	// (hang, reset).
	Status   int
	SigOK    bool
	Attempt  int // nth request of this webhook-id at this endpoint
	BodySize int
	// Done is when the handler finished (answered, or gave up on a client
	// that went away).
	Done time.Time
	// Conn numbers the connection the request came on (see ConnsFrom).
	Conn uint64
}

// Receiver is a 127.0.0.1 HTTP server for many endpoints (path /e/<id>)
// that verifies signatures and records every request; with
// ReceiverOptions.TLS it serves https.
type Receiver struct {
	URL string // http://127.0.0.1:port, or https://127.0.0.1:port with TLS

	srv *http.Server
	ln  net.Listener

	mu        sync.Mutex
	endpoints map[string]*recvEndpoint
	reqs      []Request
	counts    map[pairKey]int
	firstOK   map[pairKey]time.Time
	trapHits  atomic.Int64
	conns     atomic.Int64 // connections accepted
	// connsByAddr are the connections accepted from each remote address,
	// in order (under mu): a sender's open sockets name its connections.
	connsByAddr map[string][]connAccept
	connSeq     uint64
	fullTLS     atomic.Int64 // TLS handshakes in full
	resumeTLS   atomic.Int64 // TLS handshakes that resumed a session
	// KeepRequests false keeps only counts and first-2xx times (benchmark).
	keepAll bool
	onFirst func(endpointID, webhookID string, at time.Time)
}

type pairKey struct{ endpoint, id string }

// connAccept is one accepted connection.
type connAccept struct {
	id uint64
	at time.Time
}

type recvEndpoint struct {
	spec EndpointSpec
	wh   *standardwebhooks.Webhook
}

// ReceiverOptions configure a Receiver.
type ReceiverOptions struct {
	// KeepRequests keeps every Request (chaos); false keeps only per-pair
	// counts and first-2xx times (benchmark). Defaults to false.
	KeepRequests bool
	// OnFirst2xx, if set, is called on the first 2xx answer of each
	// (endpoint, webhook-id).
	OnFirst2xx func(endpointID, webhookID string, at time.Time)
	// SkipVerify skips signature verification (benchmark baselines that
	// measure the sender, not the receiver, still verify by default).
	SkipVerify bool
	// TLS, when set, makes the receiver serve https with this config (its
	// certificate must name 127.0.0.1; internal/tlstest issues such ones
	// for a test CA, whose file hookd then trusts with --endpoint-ca-file).
	// HTTP/2 is offered by ALPN; NextProtos ["http/1.1"] keeps it to
	// HTTP/1.1. Defaults to nil (plain http).
	TLS *tls.Config
	// ConnState, if set, is also called with every connection's state
	// changes (the benchmark counts connections with it). Defaults to nil.
	ConnState func(net.Conn, http.ConnState)
}

// StartReceiver listens on 127.0.0.1:0.
func StartReceiver(opts ReceiverOptions) (*Receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	scheme := "http://"
	if opts.TLS != nil {
		scheme = "https://"
	}
	r := &Receiver{
		URL: scheme + ln.Addr().String(), ln: ln, endpoints: map[string]*recvEndpoint{},
		counts: map[pairKey]int{}, firstOK: map[pairKey]time.Time{}, keepAll: opts.KeepRequests, onFirst: opts.OnFirst2xx,
		connsByAddr: map[string][]connAccept{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /e/{id}", func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, !opts.SkipVerify) })
	mux.HandleFunc("/trap", func(w http.ResponseWriter, req *http.Request) { r.trapHits.Add(1) })
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ConnContext: r.connContext,
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				r.conns.Add(1)
			}
			if opts.ConnState != nil {
				opts.ConnState(c, st)
			}
		}}
	if opts.TLS == nil {
		go func() { _ = r.srv.Serve(ln) }()
		return r, nil
	}
	r.srv.TLSConfig = opts.TLS.Clone()
	verify := opts.TLS.VerifyConnection
	r.srv.TLSConfig.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		if cs.DidResume {
			r.resumeTLS.Add(1)
		} else {
			r.fullTLS.Add(1)
		}
		return nil
	}
	if len(opts.TLS.NextProtos) > 0 && !slices.Contains(opts.TLS.NextProtos, "h2") {
		// Without this, ServeTLS would add h2 to NextProtos.
		r.srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	go func() { _ = r.srv.ServeTLS(ln, "", "") }()
	return r, nil
}

// connKey carries a connection's number in its requests' contexts.
type connKey struct{}

// connContext numbers each accepted connection and records it under its
// remote address.
func (r *Receiver) connContext(ctx context.Context, c net.Conn) context.Context {
	r.mu.Lock()
	r.connSeq++
	id := r.connSeq
	addr := c.RemoteAddr().String()
	r.connsByAddr[addr] = append(r.connsByAddr[addr], connAccept{id, time.Now()})
	r.mu.Unlock()
	return context.WithValue(ctx, connKey{}, id)
}

// ConnsFrom returns the connections (Request.Conn) from 127.0.0.1 at the
// given ports, for each port the last accepted at or before until: given
// the local ports of a sender's open sockets at a moment, and until a
// little after it (a connection it opened just before may be accepted a
// moment later), the connections it held to this receiver then.
func (r *Receiver) ConnsFrom(ports map[int]bool, until time.Time) map[uint64]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint64]bool{}
	for addr, accepts := range r.connsByAddr {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil || !ports[int(ap.Port())] {
			continue
		}
		for i := len(accepts) - 1; i >= 0; i-- {
			if !accepts[i].at.After(until) {
				out[accepts[i].id] = true
				break
			}
		}
	}
	return out
}

// Add registers an endpoint and returns its URL.
func (r *Receiver) Add(spec EndpointSpec) (string, error) {
	wh, err := standardwebhooks.NewWebhook(spec.Secret)
	if err != nil {
		return "", fmt.Errorf("secret of %s: %w", spec.ID, err)
	}
	r.mu.Lock()
	r.endpoints[spec.ID] = &recvEndpoint{spec: spec, wh: wh}
	r.mu.Unlock()
	return r.URL + "/e/" + spec.ID, nil
}

// Close stops the server, cutting hanging requests.
func (r *Receiver) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	_ = r.srv.Close()
}

// Conns is how many connections the receiver accepted: with
// deliveries counted, the connections a sender opened per delivery.
func (r *Receiver) Conns() int64 { return r.conns.Load() }

// TLSHandshakes is how many TLS handshakes completed, in full and resumed
// (a session ticket); both zero without ReceiverOptions.TLS.
func (r *Receiver) TLSHandshakes() (full, resumed int64) {
	return r.fullTLS.Load(), r.resumeTLS.Load()
}

// TrapHits is how many requests followed a redirect to /trap (must be 0).
func (r *Receiver) TrapHits() int64 { return r.trapHits.Load() }

// Requests returns a copy of every recorded request (KeepRequests only).
func (r *Receiver) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Request(nil), r.reqs...)
}

// Total is the number of requests received.
func (r *Receiver) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.counts {
		n += c
	}
	return n
}

// FirstOK returns a copy of the first 2xx time of each (endpoint, id).
func (r *Receiver) FirstOK() map[[2]string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[[2]string]time.Time, len(r.firstOK))
	for k, v := range r.firstOK {
		out[[2]string{k.endpoint, k.id}] = v
	}
	return out
}

// OKCount returns how many (endpoint, id) pairs have had a 2xx: the size
// of FirstOK, without copying it.
func (r *Receiver) OKCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.firstOK)
}

// Reset forgets every recorded request (between benchmark phases).
func (r *Receiver) Reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = nil
	r.counts = map[pairKey]int{}
	r.firstOK = map[pairKey]time.Time{}
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request, verify bool) {
	at := time.Now()
	id := req.PathValue("id")
	r.mu.Lock()
	ep := r.endpoints[id]
	r.mu.Unlock()
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if ep == nil || err != nil {
		http.Error(w, "unknown endpoint", http.StatusNotFound)
		return
	}
	whID := req.Header.Get("webhook-id")
	sigOK := true
	if verify {
		sigOK = ep.wh.Verify(body, req.Header) == nil
	}
	k := pairKey{id, whID}
	r.mu.Lock()
	r.counts[k]++
	n := r.counts[k]
	r.mu.Unlock()

	status := r.answer(w, req, ep.spec, n, whID)
	if status == abortStream {
		// Reset the stream (RST_STREAM) without an answer, once recorded.
		status = 0
		defer panic(http.ErrAbortHandler)
	}
	conn, _ := req.Context().Value(connKey{}).(uint64)
	rec := Request{EndpointID: id, WebhookID: whID, At: at, Status: status, SigOK: sigOK, Attempt: n, BodySize: len(body),
		Done: time.Now(), Conn: conn}
	r.mu.Lock()
	if status >= 200 && status < 300 {
		if _, seen := r.firstOK[k]; !seen {
			r.firstOK[k] = at
			if r.onFirst != nil {
				r.onFirst(id, whID, at)
			}
		}
	}
	if r.keepAll {
		r.reqs = append(r.reqs, rec)
	}
	r.mu.Unlock()
}

// abortStream is answer's status for a request whose stream serve resets.
const abortStream = -1

// answer writes the response and returns the status sent (0 for none).
func (r *Receiver) answer(w http.ResponseWriter, req *http.Request, spec EndpointSpec, n int, whID string) int {
	misbehave := (spec.FailAttempts < 0 || n <= spec.FailAttempts) && (spec.FailEvery <= 1 || fnvHash(whID)%uint32(spec.FailEvery) == 0)
	if !misbehave || spec.Behave == BehaveOK {
		if spec.Latency > 0 {
			t := time.NewTimer(spec.Latency)
			select {
			case <-t.C:
			case <-req.Context().Done():
				t.Stop()
				return 0
			}
		}
		w.WriteHeader(http.StatusOK)
		return http.StatusOK
	}
	switch spec.Behave {
	case BehaveHang:
		<-req.Context().Done() // the client gives up, or the server closes
		return 0
	case BehaveReset:
		hj, ok := w.(http.Hijacker)
		if !ok {
			return abortStream // HTTP/2: no connection of its own to reset
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return 0
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close sends RST
		}
		conn.Close()
		return 0
	case BehaveSlowBytes:
		hj, ok := w.(http.Hijacker)
		if !ok {
			return slowHTTP2(w, req)
		}
		conn, _, err := hj.Hijack()
		if err != nil {
			return 0
		}
		defer conn.Close()
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
		for i := 0; i < len(resp); i++ {
			if _, err := conn.Write([]byte{resp[i]}); err != nil {
				if i >= len("HTTP/1.1 200") {
					return http.StatusOK // the status went out: the receiver answered 200
				}
				return 0
			}
			time.Sleep(15 * time.Millisecond) // the behaviour under test: a slow writer
		}
		return http.StatusOK
	case Behave5xx:
		w.WriteHeader(http.StatusServiceUnavailable)
		return http.StatusServiceUnavailable
	case Behave429:
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
		return http.StatusTooManyRequests
	case BehaveRedirMeta:
		w.Header().Set("Location", "http://169.254.169.254/latest/meta-data/iam/security-credentials/")
		w.WriteHeader(http.StatusFound)
		return http.StatusFound
	case BehaveRedirLocal:
		w.Header().Set("Location", r.URL+"/trap")
		w.WriteHeader(http.StatusFound)
		return http.StatusFound
	case BehaveHugeBody:
		w.Header().Set("Content-Length", strconv.Itoa(32<<20))
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for sent := 0; sent < 32<<20; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				break
			}
		}
		return http.StatusOK
	case BehaveEndless:
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat("y", 16<<10))
		deadline := time.Now().Add(60 * time.Second) // bounded even if the client never gives up
		for time.Now().Before(deadline) {
			if _, err := w.Write(chunk); err != nil {
				break
			}
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
			if req.Context().Err() != nil {
				break
			}
		}
		return http.StatusOK
	}
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// slowHTTP2 is BehaveSlowBytes over HTTP/2 (no connection to write to
// byte by byte): the headers after a while, then the body a byte at a time.
func slowHTTP2(w http.ResponseWriter, req *http.Request) int {
	pause := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-req.Context().Done():
			return false
		}
	}
	if !pause(60 * 15 * time.Millisecond) { // as long as HTTP/1.1's status line and headers
		return 0
	}
	w.Header().Set("Content-Length", "2")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, b := range []string{"o", "k"} {
		_, _ = io.WriteString(w, b)
		_ = rc.Flush()
		if !pause(15 * time.Millisecond) {
			break
		}
	}
	return http.StatusOK
}

func fnvHash(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}
