package delivery

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/hookd/hookd/producer/event"
)

// FuzzBody: Body and EventBody render what json.Marshal renders, byte for
// byte, and Body fails as it does.
func FuzzBody(f *testing.F) {
	for _, s := range []struct{ id, typ, data string }{
		{"evt_1", "invoice.paid", `{"invoice":"in_1","amount":1200}`},
		{"evt_1", "t", ` { "k" : [ 1 , 2 ] , "s" : "a b\t\"\\ <&>" } `},
		{"evt_1", "t", "{\"k\":\"\u2028\u2029\xe2\x80\xff\\u2028\"}"},
		{"evt_1", "t", `{"k":"\"}"}`}, {"evt_1", "t", `[1,2]`}, {"evt_1", "t", `"x"`}, {"evt_1", "t", `null`}, {"evt_1", "t", ``},
		{"evt_1", "t", `{"k":`}, {"evt_1", "t", `{} {}`}, {"evt_1", "t", "{\"k\":\"\x01\"}"},
		{"e<1>&", "t\"\\", `{}`}, {"e\u00e9", "t\x7f", `{}`}, {"e\xff", "t\n", `{}`},
	} {
		f.Add(s.id, s.typ, int64(1764464523456789000), []byte(s.data))
	}
	f.Add("e", "t", int64(-62167219200000000), []byte(`{}`))
	f.Fuzz(func(t *testing.T, id, typ string, nanos int64, data []byte) {
		created := time.Unix(0, nanos)
		want, wantErr := marshalBody(id, typ, created, orEmpty(data))
		got, err := Body(id, typ, created, data)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("Body(%q, %q, %q): error %v, json.Marshal says %v", id, typ, data, err, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Body(%q, %q, %q) = %s, json.Marshal says %s", id, typ, data, got, want)
		}
		if wantErr != nil {
			return
		}
		if got, err := EventBody(event.Envelope{ID: id, Type: typ, Created: created, Data: data}); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("EventBody(%q, %q, %q) = %s, json.Marshal says %s", id, typ, data, got, want)
		}
	})
}

func orEmpty(data []byte) json.RawMessage {
	if len(data) == 0 {
		return json.RawMessage("{}")
	}
	return data
}

// TestEventBodyAllocations: a body is one allocation of its exact size.
func TestEventBodyAllocations(t *testing.T) {
	env := event.Envelope{ID: "evt_1", Type: "invoice.paid", Created: time.Date(2026, 11, 30, 1, 2, 3, 456, time.UTC),
		Data: json.RawMessage(`{"invoice":"in_1","amount":1200}`)}
	var b []byte
	allocs := testing.AllocsPerRun(100, func() { b, _ = EventBody(env) })
	if allocs != 1 || len(b) != cap(b) {
		t.Fatalf("%v allocations, len %d cap %d; want one of the exact size", allocs, len(b), cap(b))
	}
}
