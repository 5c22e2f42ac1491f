package endpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/hookd/hookd/internal/endpoint/filter"
)

// ParseFilter checks an endpoint's payload filter; its error wraps
// ErrInvalid and names the place in the filter ("filter.data.amount:
// ..."). Empty, null and {} mean no filter (a nil Filter).
func ParseFilter(raw json.RawMessage) (*filter.Filter, error) {
	f, err := filter.Parse(raw)
	if err != nil {
		return nil, invalid("%s", strings.TrimPrefix(err.Error(), filter.ErrInvalid.Error()+": "))
	}
	return f, nil
}

// NormalizeFilter returns the form a filter is stored in: compact JSON, or
// nil when it filters nothing (empty, null, {}). It does not validate.
func NormalizeFilter(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	if b.String() == "{}" {
		return nil
	}
	return b.Bytes()
}

// Accepts reports whether ev passes the endpoint's payload filter; true
// when it has none. Only endpoints handed out by the Index have their
// filter compiled: on another Endpoint value, call CompileFilter first.
func (e *Endpoint) Accepts(ev *filter.Event) bool { return e.filter.Match(ev) }

// FilterUsesData reports whether Accepts reads the event's data.
func (e *Endpoint) FilterUsesData() bool { return e.filter.UsesData() }

// HasFilter reports whether the endpoint has a compiled payload filter.
func (e *Endpoint) HasFilter() bool { return e.filter != nil }

// errFilterUnreadable is returned by CompileFilter for a stored filter that
// no longer parses (written around hookd's validation, or by a newer
// version with more operators).
var errFilterUnreadable = errors.New("stored payload filter does not parse")

// CompileFilter compiles e.Filter for Accepts. A filter that does not
// parse leaves the endpoint unfiltered (it receives every event of its
// types: a delivery too many beats one silently lost) and is returned as
// an error for the caller to log.
func (e *Endpoint) CompileFilter() error {
	f, err := ParseFilter(e.Filter)
	if err != nil {
		e.filter = nil
		return fmt.Errorf("endpoint %s: %w: %w", e.ID, errFilterUnreadable, err)
	}
	e.filter = f
	return nil
}
