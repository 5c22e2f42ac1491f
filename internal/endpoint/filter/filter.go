// Package filter owns the payload filter language of endpoints: a small
// JSON document, modelled on Outpost's filters, that an event (its type,
// id, created and data) must match to be delivered to the endpoint.
//
//	{"type": {"$prefix": "invoice."}, "data": {"amount": {"$gte": 100}, "currency": {"$in": ["EUR", "USD"]}}}
//
// A filter is parsed and checked once (Parse), at create and when the
// endpoint index loads, into a tree that Match evaluates without
// allocating. It never does I/O, never logs, and never panics on any input:
// the parser and the evaluator are fuzzed.
//
// Internal: only hookd's own packages can import it.
package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Limits of a filter, so that evaluating one stays cheap on the router's
// hot path whatever an account writes.
const (
	// MaxBytes bounds the filter's JSON text.
	MaxBytes = 4096
	// MaxDepth bounds the nesting of objects and arrays.
	MaxDepth = 16
	// MaxNodes bounds the operators and fields of one filter.
	MaxNodes = 256
	// MaxList bounds the values of one $in or $nin.
	MaxList = 256
)

// Event is what a filter is evaluated against. Data is the decoded JSON
// payload (DecodeData); it may be nil when the filter does not use it
// (UsesData).
type Event struct {
	Type    string
	ID      string
	Created time.Time
	Data    any
}

// ErrInvalid is wrapped by every error of Parse.
var ErrInvalid = errors.New("invalid filter")

// Filter is a parsed filter; safe for concurrent use.
type Filter struct {
	root     node
	usesData bool
}

// Match reports whether ev passes the filter. A nil Filter passes every
// event.
func (f *Filter) Match(ev *Event) bool {
	if f == nil {
		return true
	}
	return f.root.match(ev, true)
}

// UsesData reports whether the filter reads the event's data, i.e. whether
// Match needs Event.Data decoded.
func (f *Filter) UsesData() bool { return f != nil && f.usesData }

// DecodeData decodes an event's data for Match.
func DecodeData(raw []byte) (any, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decoding event data: %w", err)
	}
	return v, nil
}

// Parse checks and compiles a filter. Empty input, "null" and "{}" give a
// nil Filter, which passes every event. Errors wrap ErrInvalid, are one
// line, and name the place in the filter ("filter.data.amount: ...").
func Parse(raw []byte) (*Filter, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if len(raw) > MaxBytes {
		return nil, fmt.Errorf("%w: filter: at most %d bytes, got %d", ErrInvalid, MaxBytes, len(raw))
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%w: filter: not JSON: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "json: "))
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: filter: must be a JSON object, got %s", ErrInvalid, kindOf(doc))
	}
	if len(m) == 0 {
		return nil, nil
	}
	p := &parser{}
	root, err := p.object("filter", m, kindEvent, 1)
	if err != nil {
		return nil, err
	}
	return &Filter{root: root, usesData: p.usesData}, nil
}

// kind is what a place in the filter matches: the event itself, one of its
// string fields, its created time, or any JSON value of its data.
type kind int

const (
	kindEvent kind = iota
	kindString
	kindTime
	kindJSON
)

type parser struct {
	nodes    int
	usesData bool
}

func (p *parser) fail(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, path, fmt.Sprintf(format, args...))
}

func (p *parser) count(path string, depth int) error {
	p.nodes++
	switch {
	case p.nodes > MaxNodes:
		return p.fail(path, "the filter has more than %d operators and fields", MaxNodes)
	case depth > MaxDepth:
		return p.fail(path, "nested deeper than %d levels", MaxDepth)
	}
	return nil
}

// object compiles a filter object at path: its keys are fields of the
// value there (type, id, created, data at the top; data's own fields
// below data) or operators, all of which must hold.
func (p *parser) object(path string, m map[string]any, k kind, depth int) (node, error) {
	if err := p.count(path, depth); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, p.fail(path, "an empty object matches nothing meaningful; leave it out")
	}
	var all allOf
	for _, key := range slices.Sorted(maps.Keys(m)) {
		n, err := p.entry(path, key, m[key], k, depth)
		if err != nil {
			return nil, err
		}
		all = append(all, n)
	}
	if len(all) == 1 {
		return all[0], nil
	}
	return all, nil
}

func (p *parser) entry(path, key string, v any, k kind, depth int) (node, error) {
	if !strings.HasPrefix(key, "$") {
		return p.field(path, key, v, k, depth)
	}
	at := path + "." + key
	switch key {
	case "$and", "$or":
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			return nil, p.fail(at, "must be a non-empty array of filter objects")
		}
		subs := make([]node, 0, len(list))
		for i, item := range list {
			m, ok := item.(map[string]any)
			if !ok {
				return nil, p.fail(fmt.Sprintf("%s[%d]", at, i), "must be a filter object, got %s", kindOf(item))
			}
			n, err := p.object(fmt.Sprintf("%s[%d]", at, i), m, k, depth+1)
			if err != nil {
				return nil, err
			}
			subs = append(subs, n)
		}
		if key == "$and" {
			return allOf(subs), nil
		}
		return anyOf(subs), nil
	case "$not":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, p.fail(at, "must be a filter object, got %s", kindOf(v))
		}
		n, err := p.object(at, m, k, depth+1)
		if err != nil {
			return nil, err
		}
		return not{n}, nil
	}
	if k == kindEvent {
		return nil, p.fail(at, "an operator must apply to a field: type, id, created or data (e.g. {\"type\": {%q: ...}})", key)
	}
	return p.operator(at, key, v, k)
}

// field compiles the filter of one field of the value at path.
func (p *parser) field(path, key string, v any, k kind, depth int) (node, error) {
	at := path + "." + key
	sub := kindJSON
	switch k {
	case kindEvent:
		switch key {
		case "type", "id":
			sub = kindString
		case "created":
			sub = kindTime
		case "data":
			p.usesData = true
		default:
			return nil, p.fail(at, "unknown field; a filter matches type, id, created and data (write data fields under \"data\")")
		}
	case kindString, kindTime:
		return nil, p.fail(at, "%s is not an object: use an operator ($eq, $in, $gt, ...) here", path)
	}
	var n node
	var err error
	if m, ok := v.(map[string]any); ok {
		n, err = p.object(at, m, sub, depth+1)
	} else {
		n, err = p.operator(at, "$eq", v, sub)
	}
	if err != nil {
		return nil, err
	}
	if k == kindEvent {
		return eventField{name: key, sub: n}, nil
	}
	return objectField{name: key, sub: n}, nil
}

// operator compiles a comparison of the value at path.
func (p *parser) operator(at, op string, v any, k kind) (node, error) {
	if err := p.count(at, 0); err != nil {
		return nil, err
	}
	switch op {
	case "$eq", "$neq":
		x, err := p.operand(at, v, k)
		if err != nil {
			return nil, err
		}
		if op == "$eq" {
			return eq{x}, nil
		}
		return not{eq{x}}, nil
	case "$in", "$nin":
		list, ok := v.([]any)
		if !ok || len(list) > MaxList {
			return nil, p.fail(at, "must be an array of at most %d values", MaxList)
		}
		in := make(in, len(list))
		for i, item := range list {
			x, err := p.operand(fmt.Sprintf("%s[%d]", at, i), item, k)
			if err != nil {
				return nil, err
			}
			in[i] = x
		}
		if op == "$in" {
			return in, nil
		}
		return not{in}, nil
	case "$gt", "$gte", "$lt", "$lte":
		x, err := p.operand(at, v, k)
		if err != nil {
			return nil, err
		}
		switch x.(type) {
		case float64, string, time.Time:
		default:
			return nil, p.fail(at, "compares with a number or a string, got %s", kindOf(x))
		}
		return cmp{op: cmpOps[op], x: x}, nil
	case "$prefix":
		s, ok := v.(string)
		if !ok || k == kindTime {
			return nil, p.fail(at, "must be a string, on a string field")
		}
		return prefix(s), nil
	case "$exists":
		b, ok := v.(bool)
		if !ok {
			return nil, p.fail(at, "must be true or false")
		}
		return exists(b), nil
	}
	return nil, p.fail(at, "unknown operator; use $eq, $neq, $in, $nin, $gt, $gte, $lt, $lte, $prefix, $exists, $and, $or or $not")
}

// operand checks a value compared with the field's: created compares with
// RFC 3339 times, type and id with strings, data with any JSON value.
func (p *parser) operand(at string, v any, k kind) (any, error) {
	switch k {
	case kindString:
		if _, ok := v.(string); !ok {
			return nil, p.fail(at, "must be a string, got %s", kindOf(v))
		}
	case kindTime:
		s, ok := v.(string)
		if !ok {
			return nil, p.fail(at, "must be an RFC 3339 time, got %s", kindOf(v))
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, p.fail(at, "must be an RFC 3339 time (2026-12-03T12:00:00Z), got %q", clip(s))
		}
		return t, nil
	}
	return v, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	case time.Time:
		return "a time"
	}
	return fmt.Sprintf("%T", v)
}

func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}
