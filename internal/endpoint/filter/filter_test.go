package filter_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/endpoint/filter"
)

func event(t testing.TB, data string) *filter.Event {
	t.Helper()
	d, err := filter.DecodeData([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return &filter.Event{Type: "invoice.paid", ID: "evt_1", Created: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC), Data: d}
}

const data = `{"amount": 150, "currency": "EUR", "customer": {"country": "NL", "vip": true}, "tags": ["a", "b"], "note": null}`

func TestMatch(t *testing.T) {
	t.Parallel()
	ev := event(t, data)
	for _, tc := range []struct {
		filter string
		want   bool
	}{
		{``, true},
		{`{}`, true},
		{`null`, true},
		{`{"type": "invoice.paid"}`, true},
		{`{"type": "invoice.created"}`, false},
		{`{"type": {"$prefix": "invoice."}}`, true},
		{`{"type": {"$prefix": "customer."}}`, false},
		{`{"id": {"$in": ["evt_1", "evt_2"]}}`, true},
		{`{"id": {"$nin": ["evt_1"]}}`, false},
		{`{"created": {"$gte": "2026-12-03T12:00:00Z"}}`, true},
		{`{"created": {"$gt": "2026-12-03T13:00:00+01:00"}}`, false}, // the same instant
		{`{"created": {"$lt": "2026-12-04T00:00:00Z"}}`, true},
		{`{"created": "2026-12-03T13:00:00+01:00"}`, true},
		{`{"data": {"amount": 150}}`, true},
		{`{"data": {"amount": {"$gt": 100}}}`, true},
		{`{"data": {"amount": {"$gt": 150}}}`, false},
		{`{"data": {"amount": {"$gte": 150, "$lte": 150}}}`, true},
		{`{"data": {"amount": {"$lt": "200"}}}`, false}, // a number never compares with a string
		{`{"data": {"currency": {"$in": ["EUR", "USD"]}}}`, true},
		{`{"data": {"currency": {"$neq": "EUR"}}}`, false},
		{`{"data": {"missing": {"$neq": "EUR"}}}`, true},
		{`{"data": {"customer": {"country": "NL"}}}`, true},
		{`{"data": {"customer": {"country": "DE"}}}`, false},
		{`{"data": {"customer": {"vip": true}}}`, true},
		{`{"data": {"customer": {"$exists": true}}}`, true},
		{`{"data": {"missing": {"$exists": false}}}`, true},
		{`{"data": {"note": {"$exists": true}}}`, true}, // null is present
		{`{"data": {"note": null}}`, true},
		{`{"data": {"amount": {"country": {"$exists": false}}}}`, true}, // a number has no fields
		{`{"data": {"tags": ["a", "b"]}}`, true},
		{`{"data": {"tags": ["b", "a"]}}`, false},
		{`{"data": {"customer": {"$eq": {"country": "NL", "vip": true}}}}`, true},
		{`{"$or": [{"type": "x"}, {"data": {"amount": 150}}]}`, true},
		{`{"$or": [{"type": "x"}, {"data": {"amount": 1}}]}`, false},
		{`{"$and": [{"type": "invoice.paid"}, {"data": {"currency": "EUR"}}]}`, true},
		{`{"$not": {"type": "invoice.paid"}}`, false},
		{`{"data": {"$not": {"amount": {"$lt": 100}}}}`, true},
		{`{"type": "invoice.paid", "data": {"currency": "USD"}}`, false},
		{`{"data": {"customer": {"country": {"$in": ["NL", "BE"]}}, "amount": {"$gte": 100}}}`, true},
	} {
		f, err := filter.Parse([]byte(tc.filter))
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.filter, err)
		}
		if got := f.Match(ev); got != tc.want {
			t.Errorf("Match(%s) = %v, want %v", tc.filter, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ filter, want string }{
		{`[1]`, "filter: must be a JSON object, got an array"},
		{`{"type": `, "filter: not JSON"},
		{`{"amount": 1}`, `filter.amount: unknown field`},
		{`{"$gt": 1}`, `filter.$gt: an operator must apply to a field`},
		{`{"type": {"$gt": 1}}`, `filter.type.$gt: must be a string, got a number`},
		{`{"type": {"x": 1}}`, `filter.type.x: filter.type is not an object`},
		{`{"created": {"$gt": "yesterday"}}`, `filter.created.$gt: must be an RFC 3339 time`},
		{`{"created": {"$prefix": "2026"}}`, `filter.created.$prefix: must be a string, on a string field`},
		{`{"data": {"a": {"$regex": "x"}}}`, `filter.data.a.$regex: unknown operator`},
		{`{"data": {"a": {"$in": "x"}}}`, `filter.data.a.$in: must be an array`},
		{`{"data": {"a": {"$gt": true}}}`, `filter.data.a.$gt: compares with a number or a string, got a boolean`},
		{`{"data": {"a": {"$exists": 1}}}`, `filter.data.a.$exists: must be true or false`},
		{`{"$or": []}`, `filter.$or: must be a non-empty array`},
		{`{"$or": [1]}`, `filter.$or[0]: must be a filter object, got a number`},
		{`{"$not": [1]}`, `filter.$not: must be a filter object, got an array`},
		{`{"data": {}}`, `filter.data: an empty object`},
		{`{"data": ` + strings.Repeat(`{"a": `, 20) + `1` + strings.Repeat(`}`, 21), `nested deeper than 16`},
		{`{"data": {"a": "` + strings.Repeat("x", filter.MaxBytes) + `"}}`, `filter: at most 4096 bytes`},
	} {
		_, err := filter.Parse([]byte(tc.filter))
		if err == nil || !errors.Is(err, filter.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.60s) = %v, want an ErrInvalid containing %q", tc.filter, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%.60s): error of more than one line: %q", tc.filter, err)
		}
	}
}

func TestUsesData(t *testing.T) {
	t.Parallel()
	for f, want := range map[string]bool{`{"type": "a"}`: false, `{"$or": [{"type": "a"}, {"data": {"b": 1}}]}`: true, `{}`: false} {
		p, err := filter.Parse([]byte(f))
		if err != nil {
			t.Fatal(err)
		}
		if p.UsesData() != want {
			t.Errorf("UsesData(%s) = %v, want %v", f, !want, want)
		}
	}
}

func TestTooManyNodes(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString(`{"$or": [`)
	for i := range filter.MaxNodes {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"id": "x"}`)
	}
	b.WriteString(`]}`)
	_, err := filter.Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "more than 256 operators") {
		t.Fatalf("Parse of %d alternatives = %v, want a node limit error", filter.MaxNodes, err)
	}
}

func BenchmarkMatch(b *testing.B) {
	f, err := filter.Parse([]byte(`{"type": {"$prefix": "invoice."}, "data": {"amount": {"$gte": 100}, "currency": {"$in": ["EUR", "USD"]}}}`))
	if err != nil {
		b.Fatal(err)
	}
	ev := event(b, data)
	for b.Loop() {
		if !f.Match(ev) {
			b.Fatal("no match")
		}
	}
}
