package event

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// marshalSeeds are envelopes near the edges of what Marshal's fast path
// takes: data that needs compacting or escaping, invalid or deep data,
// string fields that need escaping, odd created times.
var marshalSeeds = []struct {
	id, account, typ string
	data             string
	created          time.Time
}{
	{"evt_1", "acct_1", "invoice.paid", `{"invoice":"in_1"}`, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)},
	{"", "a", "t", ``, time.Time{}},
	{"e", "a", "t", `{"n": 1, "amount": 1200}`, time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.FixedZone("x", 3600))},
	{"e", "a", "t", " \t\r\n{ \"k\" : [ 1 , -2.5e+3 , true , false , null , \"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9 \" ] } \n", time.Time{}},
	{"e", "a", "t", "{\"a\":\"<&>\u2028\u2029\xff\xe2\x80\xe2\x80\xa8\",\"<\":\"\\u003c\\\\<\"}", time.Time{}},
	{"e", "a", "t", "{\"a\":\"\xe2\x80\"}", time.Time{}},
	{"e", "a", "t", `[1,2]`, time.Time{}}, {"e", "a", "t", `"s"`, time.Time{}}, {"e", "a", "t", `null`, time.Time{}},
	{"e", "a", "t", ` `, time.Time{}}, {"e", "a", "t", `{`, time.Time{}}, {"e", "a", "t", `{} {}`, time.Time{}},
	{"e", "a", "t", `{"k":01}`, time.Time{}}, {"e", "a", "t", `{"k":"` + "\x01" + `"}`, time.Time{}},
	{"e", "a", "t", `{"k":` + strings.Repeat("[", 1100) + strings.Repeat("]", 1100) + `}`, time.Time{}},
	{"e", "a", "t", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), time.Time{}},
	{"e<", "a", "t", `{}`, time.Time{}}, {"e", "a&b", "t", `{}`, time.Time{}}, {"e", "a", "t>", `{}`, time.Time{}},
	{"e", "a\"", "t", `{}`, time.Time{}}, {"e", "a\\", "t", `{}`, time.Time{}}, {"e", "caf\u00e9", "t", `{}`, time.Time{}},
	{"e", "a\u2028", "t", `{}`, time.Time{}}, {"e", "a\x00", "t", `{}`, time.Time{}}, {"e", "a\xff", "t", `{}`, time.Time{}},
	{"e", "", "", `{}`, time.Time{}}, {"e f", "a b", "t~", `{}`, time.Time{}},
	{"e", "a", "t", `{}`, time.Date(-1, 12, 31, 23, 0, 0, 0, time.UTC)},
	{"e", "a", "t", `{}`, time.Date(10000, 1, 1, 0, 0, 0, 1, time.UTC)},
}

// FuzzMarshalFast: Marshal (the fast path when it applies) and
// marshalGeneral, the encoding/json reference, agree on every envelope:
// the same bytes, or the same error.
func FuzzMarshalFast(f *testing.F) {
	for _, s := range marshalSeeds {
		f.Add(s.id, s.account, s.typ, []byte(s.data), s.created.Unix(), int64(s.created.Nanosecond()), s.created.IsZero())
	}
	f.Fuzz(func(t *testing.T, id, account, typ string, data []byte, sec, nsec int64, zero bool) {
		e := Envelope{ID: id, Account: account, Type: typ, Data: data}
		if !zero {
			e.Created = time.Unix(sec, nsec)
		}
		got, gotErr := Marshal(e)
		want, wantErr := marshalGeneral(e)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%+v: error %v, encoding/json says %v", e, gotErr, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nencoded  %q\nencoding/json %q", e, got, want)
		}
		if wantErr != nil {
			if _, ok := marshalFast(e); ok {
				t.Fatalf("%+v: the fast path accepted what encoding/json refuses", e)
			}
		}
	})
}

// TestMarshalFastTakesCommonEnvelopes: the envelopes the relay writes,
// and data that needs compacting or HTML escaping, do not fall back to
// encoding/json.
func TestMarshalFastTakesCommonEnvelopes(t *testing.T) {
	for _, s := range marshalSeeds[:6] {
		e := Envelope{ID: s.id, Account: s.account, Type: s.typ, Data: []byte(s.data), Created: s.created}
		if _, ok := marshalFast(e); !ok {
			t.Errorf("%+v: fell back to encoding/json", e)
		}
	}
}

// TestMarshalAllocations: an envelope costs one allocation, its bytes.
func TestMarshalAllocations(t *testing.T) {
	s := marshalSeeds[2]
	e := Envelope{ID: s.id, Account: s.account, Type: s.typ, Data: []byte(s.data), Created: s.created}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Marshal(e); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Fatalf("%v allocations per Marshal, want 1", allocs)
	}
}

// TestMarshalRefusalIsInvalidJSON (issue 29): data that cannot be encoded
// (the deep-nesting outbox row) is an *InvalidError with the reason the
// router gives the same envelope, so that the relay can dead-letter it
// alike instead of failing on it forever.
func TestMarshalRefusalIsInvalidJSON(t *testing.T) {
	deep := `{"x":` + strings.Repeat("[", 10000) + "1" + strings.Repeat("]", 10000) + `}`
	for _, data := range []string{deep, `{`, `{"k":01}`} {
		_, err := Marshal(Envelope{ID: "e", Account: "a", Type: "t", Data: []byte(data)})
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Reason != ReasonInvalidJSON || strings.Contains(err.Error(), "\n") {
			t.Fatalf("%.40s: %v, want an invalid_json *InvalidError", data, err)
		}
		raw := `{"id":"e","account":"a","type":"t","data":` + data + `}`
		if _, perr := Parse([]byte(raw), Origin{}, 1<<20); !errors.As(perr, &ie) || ie.Reason != ReasonInvalidJSON {
			t.Fatalf("%.40s: Parse says %v, Marshal %v", data, perr, err)
		}
	}
}
