package filter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/endpoint/filter"
)

// FuzzFilter parses any filter text and, when it parses, evaluates it on
// any data: neither may panic, a parse error must wrap ErrInvalid, and a
// filter and its $not must disagree on every event.
func FuzzFilter(f *testing.F) {
	for _, s := range []struct{ filter, data string }{
		{`{"type": "invoice.paid"}`, `{}`},
		{`{"type": {"$prefix": "inv"}, "id": {"$in": ["a", "b"]}}`, `{"a": 1}`},
		{`{"created": {"$gte": "2026-12-03T12:00:00Z", "$lt": "2027-01-01T00:00:00Z"}}`, `{}`},
		{`{"data": {"amount": {"$gt": 100}, "currency": {"$nin": ["EUR"]}}}`, `{"amount": 150, "currency": "USD"}`},
		{`{"data": {"customer": {"country": "NL", "tags": ["a"]}}}`, `{"customer": {"country": "NL", "tags": ["a"]}}`},
		{`{"$or": [{"data": {"a": {"$exists": false}}}, {"$not": {"type": "x"}}]}`, `{"a": null}`},
		{`{"data": {"a": {"$eq": {"b": [1, 2, {"c": null}]}}}}`, `{"a": {"b": [1, 2, {"c": null}]}}`},
		{`{"data": {"a": {"$lte": "m", "$neq": "k"}}}`, `{"a": "b"}`},
		{`{"$and": [{"data": {"x": {"y": {"z": 1}}}}]}`, `[1, 2]`},
		{`{"data": {"a": 1e308}}`, `{"a": 1e308}`},
	} {
		f.Add(s.filter, s.data)
	}
	f.Fuzz(func(t *testing.T, text, data string) {
		flt, err := filter.Parse([]byte(text))
		if err != nil {
			if !errors.Is(err, filter.ErrInvalid) {
				t.Fatalf("Parse error %v does not wrap ErrInvalid", err)
			}
			return
		}
		d, err := filter.DecodeData([]byte(data))
		if err != nil {
			d = nil
		}
		ev := &filter.Event{Type: "invoice.paid", ID: "evt_1", Created: time.Unix(1_800_000_000, 0), Data: d}
		got := flt.Match(ev)
		if flt == nil {
			if !got {
				t.Fatal("the empty filter refused an event")
			}
			return
		}
		neg, err := filter.Parse([]byte(`{"$not": ` + text + `}`))
		if err != nil {
			return // one level deeper or longer than the limits
		}
		if neg.Match(ev) == got {
			t.Fatalf("%s and its $not both gave %v", text, got)
		}
	})
}
