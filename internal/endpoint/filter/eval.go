package filter

import (
	"strings"
	"time"
)

// node is one compiled test of a value; present is false when the field
// the value would come from is missing (then only $exists: false, $neq
// and $nin hold).
type node interface {
	match(v any, present bool) bool
}

type allOf []node

func (a allOf) match(v any, present bool) bool {
	for _, n := range a {
		if !n.match(v, present) {
			return false
		}
	}
	return true
}

type anyOf []node

func (a anyOf) match(v any, present bool) bool {
	for _, n := range a {
		if n.match(v, present) {
			return true
		}
	}
	return false
}

type not struct{ n node }

func (n not) match(v any, present bool) bool { return !n.n.match(v, present) }

// eventField tests one of the event's own fields.
type eventField struct {
	name string
	sub  node
}

func (f eventField) match(v any, _ bool) bool {
	ev, ok := v.(*Event)
	if !ok {
		return false
	}
	switch f.name {
	case "type":
		return f.sub.match(ev.Type, true)
	case "id":
		return f.sub.match(ev.ID, true)
	case "created":
		return f.sub.match(ev.Created, true)
	}
	return f.sub.match(ev.Data, ev.Data != nil)
}

// objectField tests a field of a JSON object; a value that is not an
// object has no fields.
type objectField struct {
	name string
	sub  node
}

func (f objectField) match(v any, present bool) bool {
	m, ok := v.(map[string]any)
	if !present || !ok {
		return f.sub.match(nil, false)
	}
	x, ok := m[f.name]
	return f.sub.match(x, ok)
}

type eq struct{ x any }

func (e eq) match(v any, present bool) bool { return present && equal(v, e.x) }

type in []any

func (l in) match(v any, present bool) bool {
	if !present {
		return false
	}
	for _, x := range l {
		if equal(v, x) {
			return true
		}
	}
	return false
}

type cmpOp int

const (
	opGT cmpOp = iota
	opGTE
	opLT
	opLTE
)

var cmpOps = map[string]cmpOp{"$gt": opGT, "$gte": opGTE, "$lt": opLT, "$lte": opLTE}

// cmp orders numbers with numbers, strings with strings (byte order) and
// times with times; values of different kinds never compare.
type cmp struct {
	op cmpOp
	x  any
}

func (c cmp) match(v any, present bool) bool {
	if !present {
		return false
	}
	var r int
	switch x := c.x.(type) {
	case float64:
		y, ok := v.(float64)
		if !ok {
			return false
		}
		switch {
		case y < x:
			r = -1
		case y > x:
			r = 1
		case y != x: // NaN cannot come from JSON; kept safe anyway
			return false
		}
	case string:
		y, ok := v.(string)
		if !ok {
			return false
		}
		r = strings.Compare(y, x)
	case time.Time:
		y, ok := v.(time.Time)
		if !ok {
			return false
		}
		r = y.Compare(x)
	default:
		return false
	}
	switch c.op {
	case opGT:
		return r > 0
	case opGTE:
		return r >= 0
	case opLT:
		return r < 0
	}
	return r <= 0
}

type prefix string

func (p prefix) match(v any, present bool) bool {
	s, ok := v.(string)
	return present && ok && strings.HasPrefix(s, string(p))
}

type exists bool

func (e exists) match(_ any, present bool) bool { return present == bool(e) }

// equal is JSON equality: numbers by value, arrays element by element,
// objects key by key; times (created) by instant.
func equal(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case string:
		y, ok := b.(string)
		return ok && x == y
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, xv := range x {
			yv, ok := y[k]
			if !ok || !equal(xv, yv) {
				return false
			}
		}
		return true
	}
	return false
}
