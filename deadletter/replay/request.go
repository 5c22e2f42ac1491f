package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hookd/hookd/store"
)

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
	// IncludeResolved replays resolved dead letters too: those whose
	// delivery was delivered since they were dead-lettered, which are
	// otherwise skipped as SkipAlreadyDelivered. It is part of the request
	// (and of its derived id).
	IncludeResolved bool
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
	// Scanned how many of them were read (this run and earlier ones), or
	// of a request with an Account, how many of its dead letters.
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
	SinceSpec string `json:"since_spec,omitempty"`
	UntilSpec string `json:"until_spec,omitempty"`
	Limit     int64  `json:"limit,omitempty"`
	Force     bool   `json:"force,omitempty"`
	// IncludeResolved is the request's Request.IncludeResolved.
	IncludeResolved bool   `json:"include_resolved,omitempty"`
	RequestHash     string `json:"request_hash"`
}

// DerivedID is the id of the request when none is given: "rpl_" and 20 hex
// digits of the request hash.
func (r *Request) DerivedID() string {
	if r.Kind == "" {
		r.Kind = KindDLQ
	}
	return "rpl_" + r.requestHash()[:20]
}

// storedJSON is the request's filter column: its filter, bounds as typed,
// limit, flags and hash.
func (r *Request) storedJSON() ([]byte, error) {
	since, until := r.specs()
	return json.Marshal(storedFilter{Filter: r.Filter, SinceSpec: since, UntilSpec: until, Limit: r.Limit, Force: r.Force,
		IncludeResolved: r.IncludeResolved, RequestHash: r.requestHash()})
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
// account, filter (times as typed, so "24h" is the same request tomorrow),
// limit and IncludeResolved (omitted when false, so the requests made
// before it existed keep their ids).
func (r *Request) requestHash() string {
	since, until := r.specs()
	f := r.Filter
	f.Since, f.Until = time.Time{}, time.Time{}
	b, _ := json.Marshal(struct {
		Kind, Actor, Reason, Account, Since, Until string
		Filter                                     Filter
		Limit                                      int64
		IncludeResolved                            bool `json:",omitempty"`
	}{r.Kind, r.Actor, r.Reason, r.Account, since, until, f, r.Limit, r.IncludeResolved})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
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
