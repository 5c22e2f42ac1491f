// Package replay owns finding dead letters and sending them again: Scan
// streams the dead-letter topic through a Filter (hookctl dlq list), and
// Run re-produces the matching dead letters to the deliveries topic, with
// the same webhook-id and a fresh attempt count, recording the request in
// webhooks.replays (hookctl dlq replay, hookctl endpoints resend, POST
// /v1/replays). A request is resumable: its progress (the next offset of
// every dead-letter partition) is saved only after the broker acknowledged
// the records replayed before it, and a resumed run first reads back what
// an interrupted run produced, so one request never replays a dead letter
// twice. A dead letter is replayed only to an existing endpoint of its own
// account (its hookd-account header), for a request of that account or an
// operator's; any other is skipped as account_mismatch and never sent. It
// never sends HTTP (the dispatcher does, through the normal path), never
// holds more than one fetch and one produce chunk in memory, and never
// changes a dead letter.
package replay

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/delivery"
	"github.com/hookd/hookd/store"
	"github.com/hookd/hookd/topics"
)

// HeaderSource names, on a replayed delivery record, the dead letter it
// re-sends: "<partition>/<offset>" of the DLQ topic. A resumed replay reads
// it back to learn which records an interrupted run already produced.
const HeaderSource = "hookd-replay-source"

// Kinds of replay requests.
const (
	KindDLQ    = "dlq"    // hookctl dlq replay, POST /v1/replays
	KindResend = "resend" // hookctl endpoints resend, POST /v1/endpoints/{id}/resend
)

// Skip reasons: why a matching dead letter was not replayed, the keys of
// Result.Skips (and of "skips" in a replay's progress).
const (
	// SkipUnreplayable: not a delivery (an invalid envelope, a malformed record).
	SkipUnreplayable = "unreplayable"
	// SkipEndpointDeleted: its endpoint no longer exists.
	SkipEndpointDeleted = "endpoint_deleted"
	// SkipEndpointDisabled: its endpoint is disabled and Force is not set.
	SkipEndpointDisabled = "endpoint_disabled"
	// SkipAccountMismatch: the record's account (its hookd-account header)
	// is not its endpoint's account, or not the account asking for the
	// replay. It is never sent: an endpoint never receives another
	// account's records.
	SkipAccountMismatch = "account_mismatch"
	// SkipOwnDeath: the death of a record this very replay sent.
	SkipOwnDeath = "died_in_this_replay"
)

// Errors callers branch on.
var (
	// ErrInvalid wraps a bad request (missing reason, bad filter).
	ErrInvalid = errors.New("invalid replay request")
	// ErrEndpointDisabled refuses a replay to a disabled endpoint without Force.
	ErrEndpointDisabled = errors.New("endpoint is disabled")
	// ErrEndpointNotFound refuses a replay to an endpoint that does not exist
	// (or, for an account, belongs to another account).
	ErrEndpointNotFound = errors.New("endpoint not found")
	// ErrRequestMismatch: an explicit replay id names a different request.
	ErrRequestMismatch = errors.New("replay id belongs to a different request")
)

// Deps are what Scan and Run work with.
type Deps struct {
	Store *store.Store
	// KafkaOpts are the client options (seeds, logging); Run and Scan add
	// their own consume and produce options.
	KafkaOpts []kgo.Opt
	Names     topics.Names
	Logger    *slog.Logger
}

// ScanStats says what a scan read.
type ScanStats struct {
	// Scanned counts the dead letters read, Matched those passing the filter.
	Scanned int64 `json:"scanned"`
	Matched int64 `json:"matched"`
}

// Scan streams the dead letters matching f to fn, partition by partition in
// offset order within each, until the end offsets listed when it started.
// fn returning an error stops the scan with it.
func Scan(ctx context.Context, deps Deps, f Filter, fn func(Entry) error) (ScanStats, error) {
	var st ScanStats
	if err := f.Validate(); err != nil {
		return st, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	adm, err := kgo.NewClient(deps.KafkaOpts...)
	if err != nil {
		return st, fmt.Errorf("kafka client: %w", err)
	}
	defer adm.Close()
	ranges, err := bounds(ctx, kadm.NewClient(adm), deps.Names.DLQ, f)
	if err != nil {
		return st, err
	}
	err = readRanges(ctx, deps.KafkaOpts, deps.Names.DLQ, ranges, func(recs []*kgo.Record) error {
		for _, r := range recs {
			st.Scanned++
			e := decode(r)
			if !f.Match(&e) {
				continue
			}
			st.Matched++
			if err := fn(e); err != nil {
				return err
			}
		}
		return nil
	})
	return st, err
}

// Request is one replay request.
type Request struct {
	// Kind is KindDLQ or KindResend. Defaults to KindDLQ.
	Kind string
	// ID names the request; empty derives it from the request itself
	// (DerivedID), so that running the same request again resumes it.
	ID string
	// Actor and Reason are recorded in the audit row; both required.
	Actor  string
	Reason string
	// Account, when set, is the account whose API token asks: only its
	// dead letters are replayed, and the row is visible to it.
	Account string
	Filter  Filter
	// SinceSpec and UntilSpec are the time bounds as the user typed them
	// ("24h"), for the request id; empty means Filter's times as RFC 3339.
	SinceSpec, UntilSpec string
	// Limit caps the dead letters replayed by the request, over all its
	// runs; 0 means no limit.
	Limit int64
	// Force replays to disabled endpoints too.
	Force bool
	// DryRun only counts (and reports through OnEntry).
	DryRun bool
	// Rate caps the records produced per second; 0 means no cap.
	Rate float64
	// OnEntry, if set, is told about every matching dead letter and what
	// is done with it: "replay", "replayed before" (found produced by an
	// interrupted run) or "skip: <why>".
	OnEntry func(e Entry, action string)
	// OnProgress, if set, is called after every saved chunk.
	OnProgress func(Progress)

	// afterProduce, set by tests, runs after a chunk was acknowledged and
	// before its progress is saved; an error abandons the run there, as a
	// crash would.
	afterProduce func() error
	// chunk, set by tests, overrides the produce chunk size.
	chunk int
}

// Progress is a running replay's position.
type Progress struct {
	ID string
	// Total is the number of dead-letter offsets the request covers;
	// Scanned how many of them were read (this run and earlier ones).
	Total, Scanned             int64
	Matched, Replayed, Skipped int64
}

// Result is what Run did.
type Result struct {
	store.Replay
	// AlreadyDone is set when the request had completed before this call:
	// nothing was replayed again.
	AlreadyDone bool `json:"already_done,omitempty"`
	// SkippedEndpoints lists, per endpoint, why its dead letters (or some
	// of them, for an account mismatch) were not replayed.
	SkippedEndpoints map[string]string `json:"skipped_endpoints,omitempty"`
	// Skips counts the skipped dead letters by reason (SkipAccountMismatch,
	// ...), over every run of the request.
	Skips map[string]int64 `json:"skips,omitempty"`
	// Unreplayable counts matching records that are not deliveries.
	Unreplayable int64 `json:"unreplayable,omitempty"`
}

// storedFilter is the filter column of webhooks.replays.
type storedFilter struct {
	Filter
	SinceSpec   string `json:"since_spec,omitempty"`
	UntilSpec   string `json:"until_spec,omitempty"`
	Limit       int64  `json:"limit,omitempty"`
	Force       bool   `json:"force,omitempty"`
	RequestHash string `json:"request_hash"`
}

// progress is the progress column of webhooks.replays.
type progress struct {
	// Ranges are the DLQ offsets the request covers, fixed when it first
	// ran: later dead letters (including deaths of this replay's own
	// records) are not part of it.
	Ranges map[int32]Range `json:"ranges"`
	// Next is, per DLQ partition, the first offset not yet handled; every
	// record replayed below it was acknowledged by the broker.
	Next map[int32]int64 `json:"next"`
	// Markers is, per deliveries partition, an offset at or below every
	// record this request produced that Next does not cover yet: a resumed
	// run reads from there to find them.
	Markers map[int32]int64 `json:"markers"`
	Scanned int64           `json:"scanned"`
	// Skips counts the skipped dead letters by reason.
	Skips map[string]int64 `json:"skips,omitempty"`
}

func (r *Request) specs() (since, until string) {
	since, until = r.SinceSpec, r.UntilSpec
	if since == "" && !r.Filter.Since.IsZero() {
		since = r.Filter.Since.UTC().Format(time.RFC3339Nano)
	}
	if until == "" && !r.Filter.Until.IsZero() {
		until = r.Filter.Until.UTC().Format(time.RFC3339Nano)
	}
	return since, until
}

// requestHash identifies the request as typed: kind, actor, reason,
// account, filter (times as typed, so "24h" is the same request tomorrow)
// and limit.
func (r *Request) requestHash() string {
	since, until := r.specs()
	f := r.Filter
	f.Since, f.Until = time.Time{}, time.Time{}
	b, _ := json.Marshal(struct {
		Kind, Actor, Reason, Account, Since, Until string
		Filter                                     Filter
		Limit                                      int64
	}{r.Kind, r.Actor, r.Reason, r.Account, since, until, f, r.Limit})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// DerivedID is the id of the request when none is given: "rpl_" and 20 hex
// digits of the request hash.
func (r *Request) DerivedID() string {
	if r.Kind == "" {
		r.Kind = KindDLQ
	}
	return "rpl_" + r.requestHash()[:20]
}

func (r *Request) validate() error {
	if r.Kind == "" {
		r.Kind = KindDLQ
	}
	switch {
	case r.Kind != KindDLQ && r.Kind != KindResend:
		return fmt.Errorf("%w: kind %q", ErrInvalid, r.Kind)
	case strings.TrimSpace(r.Reason) == "":
		return fmt.Errorf("%w: a reason is required (--reason)", ErrInvalid)
	case strings.TrimSpace(r.Actor) == "":
		return fmt.Errorf("%w: an actor is required (--actor)", ErrInvalid)
	}
	if err := checkText("reason", r.Reason, MaxReasonLen); err != nil {
		return err
	}
	if err := checkText("actor", r.Actor, MaxActorLen); err != nil {
		return err
	}
	switch {
	case r.Limit < 0:
		return fmt.Errorf("%w: limit must not be negative, got %d", ErrInvalid, r.Limit)
	case r.Rate < 0:
		return fmt.Errorf("%w: rate must not be negative, got %g", ErrInvalid, r.Rate)
	case r.ID != "" && !validID(r.ID):
		return fmt.Errorf("%w: replay id %q: 1..64 letters, digits, '_' or '-'", ErrInvalid, r.ID)
	}
	if r.Account != "" {
		if r.Filter.Account != "" && r.Filter.Account != r.Account {
			return fmt.Errorf("%w: account filter %q: a token of %s can replay only its own dead letters", ErrInvalid, r.Filter.Account, r.Account)
		}
		r.Filter.Account = r.Account
	}
	if err := r.Filter.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Bounds of the free text of a request, in characters.
const (
	MaxReasonLen = 1000
	MaxActorLen  = 255
)

// checkText refuses what the audit row cannot store faithfully (a NUL
// byte, invalid UTF-8) or should not (more than max characters).
func checkText(field, s string, max int) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s: must not contain NUL bytes", ErrInvalid, field)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s: must be valid UTF-8", ErrInvalid, field)
	case utf8.RuneCountInString(s) > max:
		return fmt.Errorf("%w: %s: at most %d characters, got %d", ErrInvalid, field, max, utf8.RuneCountInString(s))
	}
	return nil
}

func validID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Check validates req and refuses a target endpoint that does not exist
// (or is another account's) or is disabled without Force, without running
// anything: what an API answers before starting a replay in the background.
func Check(ctx context.Context, deps Deps, req *Request) error {
	if err := req.validate(); err != nil {
		return err
	}
	return checkTargetEndpoint(ctx, deps, req)
}

// Run carries out req: a dry run counts, a real run replays and resumes an
// interrupted run of the same request. It returns the audit row as saved.
// ctx ending interrupts the run (status interrupted, progress kept).
func Run(ctx context.Context, deps Deps, req Request) (Result, error) {
	if req.DryRun {
		if err := Check(ctx, deps, &req); err != nil {
			return Result{}, err
		}
		return dryRun(ctx, withLogger(deps), req)
	}
	p, err := Prepare(ctx, deps, req)
	if err != nil {
		return Result{}, err
	}
	return p.Run(ctx)
}

func withLogger(deps Deps) Deps {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return deps
}

// Prepared is a checked replay request whose audit row exists: what an
// API answers 202 for, before running it in the background, so that the
// row it points to is always there.
type Prepared struct {
	deps   Deps
	req    Request
	row    store.Replay
	stored storedFilter
}

// Prepare validates req (not a dry run), refuses a bad target endpoint,
// and creates its audit row, or finds the row of the same request made
// before (ErrRequestMismatch when an explicit id names another request).
// Nothing is replayed until Run.
func Prepare(ctx context.Context, deps Deps, req Request) (*Prepared, error) {
	deps = withLogger(deps)
	if req.DryRun {
		return nil, fmt.Errorf("%w: a dry run is not prepared, run it", ErrInvalid)
	}
	if err := Check(ctx, deps, &req); err != nil {
		return nil, err
	}
	hash := req.requestHash()
	since, until := req.specs()
	filterJSON, err := json.Marshal(storedFilter{Filter: req.Filter, SinceSpec: since, UntilSpec: until,
		Limit: req.Limit, Force: req.Force, RequestHash: hash})
	if err != nil {
		return nil, err
	}
	id := req.ID
	if id == "" {
		id = req.DerivedID()
	}
	row, _, err := deps.Store.CreateReplay(ctx, store.Replay{ID: id, Kind: req.Kind, Actor: req.Actor, Reason: req.Reason,
		Account: req.Account, Filter: filterJSON})
	if err != nil {
		return nil, err
	}
	var stored storedFilter
	if err := json.Unmarshal(row.Filter, &stored); err != nil {
		return nil, fmt.Errorf("replay %s: reading its filter: %w", id, err)
	}
	if stored.RequestHash != hash || row.Kind != req.Kind || row.Account != req.Account {
		return nil, fmt.Errorf("%w: %s was created by %s for %q", ErrRequestMismatch, id, row.Actor, row.Reason)
	}
	return &Prepared{deps: deps, req: req, row: row, stored: stored}, nil
}

// Row is the audit row as Prepare found or created it.
func (p *Prepared) Row() store.Replay { return p.row }

// Run carries the request out, or resumes it; a request already done
// replays nothing again (Result.AlreadyDone).
func (p *Prepared) Run(ctx context.Context) (Result, error) {
	id := p.row.ID
	if p.row.Status == store.ReplayDone {
		return Result{Replay: p.row, AlreadyDone: true}, nil
	}
	lock, err := p.deps.Store.LockReplay(ctx, id)
	if err != nil {
		return Result{}, err
	}
	defer lock.Unlock()
	// Read again under the lock: another run may have finished meanwhile.
	row, err := p.deps.Store.GetReplay(ctx, id)
	if err != nil {
		return Result{}, err
	}
	if row.Status == store.ReplayDone {
		return Result{Replay: row, AlreadyDone: true}, nil
	}
	// The stored filter wins: "24h" means 24h before the first run.
	req := p.req
	req.Filter, req.Limit = p.stored.Filter, p.stored.Limit
	r := &runner{deps: p.deps, req: req, row: row, skippedEPs: map[string]string{}, eps: map[string]epState{}}
	return r.run(ctx)
}

// checkTargetEndpoint refuses a request naming an endpoint that does not
// exist (or is another account's), or is disabled without Force.
func checkTargetEndpoint(ctx context.Context, deps Deps, req *Request) error {
	if req.Filter.EndpointID == "" {
		if req.Kind == KindResend {
			return fmt.Errorf("%w: resend needs an endpoint", ErrInvalid)
		}
		return nil
	}
	ep, err := deps.Store.GetEndpoint(ctx, req.Filter.EndpointID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && req.Account != "" && ep.Account != req.Account) {
		return fmt.Errorf("%w: %s", ErrEndpointNotFound, req.Filter.EndpointID)
	}
	if err != nil {
		return err
	}
	if !ep.Active() && !req.Force && !req.DryRun {
		return fmt.Errorf("%w: %s is disabled (%s); enable it first, or pass --force to replay to it anyway",
			ErrEndpointDisabled, ep.ID, ep.DisabledReason)
	}
	return nil
}

// epState is what a run knows of one endpoint.
type epState struct {
	// account is the endpoint's account; empty when it was deleted.
	account string
	// skip says why its dead letters are skipped (SkipEndpointDeleted,
	// SkipEndpointDisabled); empty: replay.
	skip string
}

// endpointState looks an endpoint up once per run.
func endpointState(ctx context.Context, deps Deps, cache map[string]epState, id string, force bool) (epState, error) {
	if s, ok := cache[id]; ok {
		return s, nil
	}
	var s epState
	ep, err := deps.Store.GetEndpoint(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.skip = SkipEndpointDeleted
	case err != nil:
		return s, err
	default:
		s.account = ep.Account
		if !ep.Active() && !force {
			s.skip = SkipEndpointDisabled
		}
	}
	cache[id] = s
	return s, nil
}

// skipText is what a skip reason says in an entry's action and in
// Result.SkippedEndpoints.
var skipText = map[string]string{
	SkipEndpointDeleted:  "endpoint deleted",
	SkipEndpointDisabled: "endpoint disabled (use --force)",
	SkipAccountMismatch:  "account_mismatch: the record's account is not the endpoint's or the request's",
	SkipOwnDeath:         "died in this replay",
}

// skipReason decides whether a matching, replayable dead letter is
// skipped, and why: a record goes only to an existing endpoint of its own
// account, for a request of that account (or an operator's).
func skipReason(e *Entry, s epState, reqAccount string) string {
	switch {
	case s.skip == SkipEndpointDeleted:
		return s.skip
	case e.Account != s.account || (reqAccount != "" && e.Account != reqAccount):
		return SkipAccountMismatch
	}
	return s.skip
}

// dryEntry decides a dry run's action on one matching dead letter; reason
// is empty when it would be replayed.
func dryEntry(ctx context.Context, deps Deps, req Request, eps map[string]epState, e *Entry) (reason, action string, err error) {
	if e.Unreplayable != "" {
		return SkipUnreplayable, "skip: " + e.Unreplayable, nil
	}
	s, err := endpointState(ctx, deps, eps, e.EndpointID, req.Force)
	if err != nil {
		return "", "", err
	}
	if reason = skipReason(e, s, req.Account); reason != "" {
		return reason, "skip: " + skipText[reason], nil
	}
	return "", "replay", nil
}

func dryRun(ctx context.Context, deps Deps, req Request) (Result, error) {
	since, until := req.specs()
	filterJSON, err := json.Marshal(storedFilter{Filter: req.Filter, SinceSpec: since, UntilSpec: until,
		Limit: req.Limit, Force: req.Force, RequestHash: req.requestHash()})
	if err != nil {
		return Result{}, err
	}
	res := Result{SkippedEndpoints: map[string]string{}, Skips: map[string]int64{}}
	eps := map[string]epState{}
	var matched, skipped int64
	_, err = Scan(ctx, deps, req.Filter, func(e Entry) error {
		reason, action, err := dryEntry(ctx, deps, req, eps, &e)
		if err != nil {
			return err
		}
		switch reason {
		case "":
			if req.Limit > 0 && res.Replayed >= req.Limit {
				return errStop
			}
			res.Replayed++ // would be replayed
		case SkipUnreplayable:
			res.Unreplayable++
		default:
			res.SkippedEndpoints[e.EndpointID] = skipText[reason]
		}
		if reason != "" {
			skipped++
			res.Skips[reason]++
		}
		matched++
		if req.OnEntry != nil {
			req.OnEntry(e, action)
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return res, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	row, _, err := deps.Store.CreateReplay(ctx, store.Replay{ID: "rpl_dry_" + hex.EncodeToString(b[:]), Kind: req.Kind,
		Actor: req.Actor, Reason: req.Reason, Account: req.Account, Filter: filterJSON, DryRun: true,
		Matched: matched, Replayed: res.Replayed, Skipped: skipped, Status: store.ReplayDone})
	if err != nil {
		return res, err
	}
	res.Replay = row
	if len(res.SkippedEndpoints) == 0 {
		res.SkippedEndpoints = nil
	}
	if len(res.Skips) == 0 {
		res.Skips = nil
	}
	return res, nil
}

// runner is one run of a replay request.
type runner struct {
	deps       Deps
	req        Request
	row        store.Replay
	prog       progress
	eps        map[string]epState
	skippedEPs map[string]string
	unreplay   int64
	// recovered holds the DLQ offsets ("p/offset") an interrupted run
	// produced without saving; pendingRecovered counts those not passed yet.
	recovered        map[string]bool
	pendingRecovered int
	total            int64
}

func (r *runner) run(ctx context.Context) (Result, error) {
	if len(r.row.Progress) > 0 {
		if err := json.Unmarshal(r.row.Progress, &r.prog); err != nil {
			return Result{}, fmt.Errorf("replay %s: reading its progress: %w", r.row.ID, err)
		}
	}
	cl, err := kgo.NewClient(append(slices.Clip(r.deps.KafkaOpts),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20),
	)...)
	if err != nil {
		return Result{}, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if r.prog.Ranges == nil {
		if r.prog.Ranges, err = bounds(ctx, adm, r.deps.Names.DLQ, r.req.Filter); err != nil {
			return r.finish(ctx, err)
		}
		r.prog.Next = map[int32]int64{}
		for p, rg := range r.prog.Ranges {
			r.prog.Next[p] = rg.From
		}
	}
	for _, rg := range r.prog.Ranges {
		r.total += rg.To - rg.From
	}
	if err := r.recover(ctx, adm); err != nil {
		return r.finish(ctx, err)
	}
	if err := r.save(ctx, ""); err != nil {
		return r.finish(ctx, err)
	}
	remaining := map[int32]Range{}
	for p, rg := range r.prog.Ranges {
		if next := max(r.prog.Next[p], rg.From); next < rg.To {
			remaining[p] = Range{From: next, To: rg.To}
		}
	}
	chunk := 1000
	if r.req.Rate > 0 {
		chunk = min(max(int(r.req.Rate), 1), chunk)
	}
	if r.req.chunk > 0 {
		chunk = r.req.chunk
	}
	pace := pacer{rate: r.req.Rate, start: time.Now()}
	pending := make([]*kgo.Record, 0, chunk)
	// Handled since the last save; applied when the chunk is acknowledged.
	next := map[int32]int64{}
	var dScanned, dMatched, dSkipped, dBefore int64
	dSkips := map[string]int64{}
	flush := func() error {
		if len(pending) > 0 {
			if err := cl.ProduceSync(ctx, pending...).FirstErr(); err != nil {
				return fmt.Errorf("producing replayed deliveries: %w", err)
			}
			if r.req.afterProduce != nil {
				if err := r.req.afterProduce(); err != nil {
					return err
				}
			}
			if r.pendingRecovered == 0 {
				for _, rec := range pending {
					if m, ok := r.prog.Markers[rec.Partition]; !ok || rec.Offset+1 > m {
						r.prog.Markers[rec.Partition] = rec.Offset + 1
					}
				}
			}
			r.row.Replayed += int64(len(pending))
			pending = pending[:0]
		}
		r.prog.Scanned += dScanned
		r.row.Matched += dMatched
		r.row.Skipped += dSkipped
		r.row.Replayed += dBefore
		dScanned, dMatched, dSkipped, dBefore = 0, 0, 0, 0
		for reason, n := range dSkips {
			if r.prog.Skips == nil {
				r.prog.Skips = map[string]int64{}
			}
			r.prog.Skips[reason] += n
			delete(dSkips, reason)
		}
		for p, o := range next {
			r.prog.Next[p] = o
			delete(next, p)
		}
		return r.save(ctx, "")
	}
	if r.req.Limit == 0 || r.row.Replayed < r.req.Limit {
		err = readRanges(ctx, r.deps.KafkaOpts, r.deps.Names.DLQ, remaining, func(recs []*kgo.Record) error {
			for _, rec := range recs {
				if r.req.Limit > 0 && r.row.Replayed+dBefore+int64(len(pending)) >= r.req.Limit {
					return errStop
				}
				dScanned++
				next[rec.Partition] = rec.Offset + 1
				e := decode(rec)
				if !r.req.Filter.Match(&e) {
					continue
				}
				dMatched++
				action, reason, err := r.action(ctx, &e)
				if err != nil {
					return err
				}
				if r.req.OnEntry != nil {
					r.req.OnEntry(e, action)
				}
				switch {
				case action == "replay":
				case action == "replayed before":
					dBefore++
					continue
				default:
					dSkipped++
					dSkips[reason]++
					continue
				}
				if err := pace.wait(ctx); err != nil {
					return err
				}
				pending = append(pending, r.record(rec, e.delivery))
				if len(pending) >= chunk {
					if err := flush(); err != nil {
						return err
					}
				}
			}
			return flush()
		})
	}
	if err == nil {
		err = flush()
	}
	return r.finish(ctx, err)
}

// action decides what to do with a matching dead letter: "replay",
// "replayed before", or "skip: <why>" with the skip reason.
func (r *runner) action(ctx context.Context, e *Entry) (action, reason string, err error) {
	if e.Unreplayable != "" {
		r.unreplay++
		return "skip: " + e.Unreplayable, SkipUnreplayable, nil
	}
	pos := strconv.Itoa(int(e.Partition)) + "/" + strconv.FormatInt(e.Offset, 10)
	if r.recovered[pos] {
		delete(r.recovered, pos)
		r.pendingRecovered--
		return "replayed before", "", nil
	}
	if e.ReplayID == r.row.ID {
		// The death of one of this request's own replays (possible only
		// with an explicit id reused across DLQ snapshots): never again.
		return "skip: " + skipText[SkipOwnDeath], SkipOwnDeath, nil
	}
	s, err := endpointState(ctx, r.deps, r.eps, e.EndpointID, r.req.Force)
	if err != nil {
		return "", "", err
	}
	if reason := skipReason(e, s, r.req.Account); reason != "" {
		if reason == SkipAccountMismatch {
			r.deps.Logger.WarnContext(ctx, "replay skips a dead letter whose account is not its endpoint's or the request's",
				"replay_id", r.row.ID, "endpoint_id", e.EndpointID, "delivery_id", e.DeliveryID, "event_id", e.EventID,
				"record_account", e.Account, "endpoint_account", s.account, "request_account", r.req.Account,
				"dlq_partition", e.Partition, "dlq_offset", e.Offset)
		}
		r.skippedEPs[e.EndpointID] = skipText[reason]
		return "skip: " + skipText[reason], reason, nil
	}
	return "replay", "", nil
}

// record builds the replayed delivery: same key, body, delivery and event
// ids; attempt 1 with no retry history; the replay id and source headers.
// The partition comes from the producer's key hashing, as for the router.
func (r *runner) record(src *kgo.Record, d *delivery.Delivery) *kgo.Record {
	fresh := *d
	fresh.Attempt = 1
	fresh.FirstAttempt, fresh.DueAt = time.Time{}, time.Time{}
	fresh.LastStatus, fresh.LastError, fresh.ClientErrors = 0, "", 0
	fresh.ReplayID = r.row.ID
	rec := fresh.Record(r.deps.Names.Deliveries)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderSource,
		Value: []byte(strconv.Itoa(int(src.Partition)) + "/" + strconv.FormatInt(src.Offset, 10))})
	return rec
}

// recover finds the records an interrupted run produced after its last
// save: every record on the deliveries topic from the saved markers on
// that carries this replay's id. With no markers yet, it sets them to the
// current end offsets (nothing of this request is above them).
func (r *runner) recover(ctx context.Context, adm *kadm.Client) error {
	topic := r.deps.Names.Deliveries
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("listing end offsets of %s: %w", topic, err)
	}
	if r.prog.Markers == nil {
		r.prog.Markers = map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) { r.prog.Markers[o.Partition] = o.Offset })
		return nil
	}
	ranges := map[int32]Range{}
	ends.Each(func(o kadm.ListedOffset) {
		if m, ok := r.prog.Markers[o.Partition]; ok && m < o.Offset {
			ranges[o.Partition] = Range{From: m, To: o.Offset}
		}
	})
	r.recovered = map[string]bool{}
	id := []byte(r.row.ID)
	err = readRanges(ctx, r.deps.KafkaOpts, topic, ranges, func(recs []*kgo.Record) error {
		for _, rec := range recs {
			var mine bool
			var src string
			for _, h := range rec.Headers {
				switch h.Key {
				case delivery.HeaderReplayID:
					mine = string(h.Value) == string(id)
				case HeaderSource:
					src = string(h.Value)
				}
			}
			if mine && src != "" {
				r.recovered[src] = true
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading back what the interrupted run produced: %w", err)
	}
	// Drop what the saved progress covers already (a run that died
	// between its save and the next chunk).
	for pos := range r.recovered {
		ps, os, _ := strings.Cut(pos, "/")
		p, _ := strconv.ParseInt(ps, 10, 32)
		o, _ := strconv.ParseInt(os, 10, 64)
		if o < r.prog.Next[int32(p)] {
			delete(r.recovered, pos)
		}
	}
	r.pendingRecovered = len(r.recovered)
	if len(r.recovered) > 0 {
		r.deps.Logger.InfoContext(ctx, "replay resumed: records produced by the interrupted run will not be sent again",
			"replay_id", r.row.ID, "found", len(r.recovered))
	}
	return nil
}

// save writes the counters and progress; status ends the run when set.
func (r *runner) save(ctx context.Context, status string) error {
	b, err := json.Marshal(r.prog)
	if err != nil {
		return err
	}
	u := store.ReplayUpdate{ID: r.row.ID, Matched: r.row.Matched, Replayed: r.row.Replayed, Skipped: r.row.Skipped,
		Progress: b, Status: status}
	if status == store.ReplayFailed {
		u.Error = r.row.Error
	}
	if err := r.deps.Store.UpdateReplay(ctx, u); err != nil {
		return err
	}
	if r.req.OnProgress != nil {
		r.req.OnProgress(Progress{ID: r.row.ID, Total: r.total, Scanned: r.prog.Scanned, Matched: r.row.Matched,
			Replayed: r.row.Replayed, Skipped: r.row.Skipped})
	}
	return nil
}

// finish records how the run ended and returns the final row.
func (r *runner) finish(ctx context.Context, runErr error) (Result, error) {
	status := store.ReplayDone
	switch {
	case runErr == nil:
	case ctx.Err() != nil:
		status, runErr = store.ReplayInterrupted, ctx.Err()
	default:
		status = store.ReplayFailed
		r.row.Error = runErr.Error()
	}
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.save(saveCtx, status); err != nil && runErr == nil {
		runErr = err
	}
	row, err := r.deps.Store.GetReplay(saveCtx, r.row.ID)
	if err != nil {
		row = r.row
	}
	res := Result{Replay: row, Unreplayable: r.unreplay, Skips: r.prog.Skips}
	if len(r.skippedEPs) > 0 {
		res.SkippedEndpoints = r.skippedEPs
	}
	return res, runErr
}

// pacer spaces records to a rate without a ticker goroutine.
type pacer struct {
	rate  float64
	start time.Time
	n     int64
}

func (p *pacer) wait(ctx context.Context) error {
	if p.rate <= 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(p.n) / p.rate * float64(time.Second)))
	p.n++
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
