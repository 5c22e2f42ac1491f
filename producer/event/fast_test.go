package event

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

var testOrigin = Origin{Topic: "webhooks.events", Partition: 3, Offset: 42, Timestamp: time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)}

// fastSeeds are envelopes near the edges of what the fast path takes.
var fastSeeds = []string{
	`{"id":"evt_1","account":"acct_1","type":"invoice.paid","data":{"invoice":"in_1"},"created":"2026-01-02T03:04:05Z"}`,
	`{"account":"a","type":"t"}`, `{"account":"a","type":"t","data":null,"created":null,"id":null}`, `{"account":"a","type":"t","id":""}`,
	`{ "account" : "a" , "type":"t" , "data" : { "k" : [ 1 , -2.5e+3 , true , false , null , "x\"\\\/\b\f\n\r\t\u00e9" ] } }`,
	"{\"account\":\"a\",\"type\":\"t\",\"data\":{\"a\":\"<&>\u2028\u2029\"}}", "{\"account\":\"a\",\"type\":\"t\",\"data\":{\"a\":\"\xff\"}}",
	`{"account":"a","type":"t","data":{"k":01}}`, `{"account":"a","type":"t","data":{"k":1.}}`, `{"account":"a","type":"t","data":{"k":-}}`,
	`{"account":"a","type":"t","data":{"k":1e}}`, `{"account":"a","type":"t","data":{"k":.5}}`, `{"account":"a","type":"t","data":{"k":+1}}`,
	`{"account":"a","type":"t","data":{"k":"\x"}}`, `{"account":"a","type":"t","data":{"k":"\u12"}}`, `{"account":"a","type":"t","data":{"k":tru}}`,
	`{"account":"a","type":"t","data":{"k":[1,]}}`, `{"account":"a","type":"t","data":{"k":1,}}`, `{"account":"a","type":"t",}`,
	`{"account":"a","type":"t"}}`, `{"account":"a","type":"t"} {}`, `{"account":"a","type":"t","data":{"k":"` + "\x01" + `"}}`,
	`{"\u0061ccount":"a","type":"t"}`, `{"account":"\u0061","type":"t"}`, `{"account":"a","account":"b","type":"t"}`,
	`{"account":"a","type":"t","Data":[]}`, `{"account":"a","type":"t","data":[]}`, `{"account":"a","type":"t","data":"{}"}`,
	`{"account":"a","type":"t","created":"2026-01-02T03:04:05.123+01:00"}`, `{"account":"a","type":"t","created":"2026-01-02"}`,
	`{"account":"a","type":"t","created":"0000-01-01T00:00:00+01:00"}`, `{"account":"a","type":"t","created":1}`,
	`{"account":"a","type":"a*"}`, `{"account":"a b","type":"t"}`, `{"account":"` + strings.Repeat("a", 256) + `","type":"t"}`,
	`{"account":"a","type":"t","extra":{"deep":[[[[{}]]]]}}`, `{"account":"a","type":"t","data":` + strings.Repeat("[", 1100) + strings.Repeat("]", 1100) + `}`,
	`{}`, `{ }`, `{"account":"a","type":"t"` + "\t\r\n " + `}`, "{\"account\":\"a\",\"type\":\"t\"}\u00a0",
	`{"account":"a","type":"t","data":{"k":"\ud800"}}`, `{"account":"a","type":"t","data":{"k":"\udc00\ud800"}}`,
	`{"account":"a","type":"t","data":{"k":"\ud83d\ude00"}}`, `{"account":"a","type":"t","data":{"k":"\\ud800"}}`,
	`{"account":"a","type":"t","data":{"k":"\ud83d\u"}}`, "{\"account\":\"a\",\"type\":\"t\",\"data\":{\"k\":\"\xed\xa0\x80\"}}",
}

// FuzzParseFast: Parse (the fast path when it applies) and parseGeneral,
// the encoding/json reference, agree on every input: the same envelope, or
// the same error, reason and detail.
func FuzzParseFast(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, gotErr := Parse(raw, testOrigin, 1<<20)
		want, wantErr := Parse(raw, testOrigin, 1<<20) // replaced below when the input reaches the paths
		if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '{' {
			want, wantErr = parseGeneral(trimmed, testOrigin)
		}
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, encoding/json says %v", raw, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) || got.Created.Location() != want.Created.Location() {
			t.Fatalf("%q: parsed %+v, encoding/json says %+v", raw, got, want)
		}
		if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '{' && !json.Valid(trimmed) {
			if _, ok := parseFast(trimmed, testOrigin); ok {
				t.Fatalf("%q: the fast path accepted invalid JSON", raw)
			}
		}
	})
}

// TestParseFastTakesCommonEnvelopes: the envelopes producers write do not
// fall back to encoding/json.
func TestParseFastTakesCommonEnvelopes(t *testing.T) {
	for _, s := range []string{fastSeeds[0], fastSeeds[1], fastSeeds[2], fastSeeds[3], fastSeeds[4], fastSeeds[5], fastSeeds[28]} {
		if _, ok := parseFast([]byte(s), testOrigin); !ok {
			t.Errorf("%s: fell back to encoding/json", s)
		}
	}
}

// TestParseAllocations: the common envelope costs two allocations, its
// strings and its data.
func TestParseAllocations(t *testing.T) {
	raw := []byte(fastSeeds[0])
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := Parse(raw, testOrigin, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("%v allocations per Parse, want at most 2", allocs)
	}
}

// FuzzValidJSON holds the hand-written scanner that both fast paths rely
// on (parseFast, marshalFast) to encoding/json's json.Valid directly: it
// never accepts what json.Valid refuses, and refuses what json.Valid
// accepts only for nesting deeper than maxFastDepth. dataIssue, run on
// what both accept, never panics and says nothing about valid UTF-8
// without a surrogate escape.
func FuzzValidJSON(f *testing.F) {
	for _, s := range fastSeeds {
		f.Add([]byte(s))
	}
	for _, s := range []string{`1`, `-0.0e-0`, `"\u00e9"`, `[]`, ` [ ] `, `{"a":}`, `"\ud800"`, `"\\"`, "\"\x7f\"", `1 2`, `--1`, `0x1`, `"` + "\xff" + `"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := validJSON(b), json.Valid(b)
		if got && !want {
			t.Fatalf("%q: the scanner accepts what encoding/json refuses", b)
		}
		if want && !got && nesting(b) <= maxFastDepth {
			t.Fatalf("%q: the scanner refuses what encoding/json accepts (nesting %d)", b, nesting(b))
		}
		if !want {
			return
		}
		why := dataIssue(b)
		if why == "" && !utf8.Valid(b) {
			t.Fatalf("%q: invalid UTF-8 passed", b)
		}
		if why != "" && utf8.Valid(b) && !bytes.Contains(b, []byte(`\u`)) && !bytes.Contains(b, []byte(`\U`)) {
			t.Fatalf("%q: refused without a reason (%s)", b, why)
		}
	})
}

// nesting is the deepest nesting of arrays and objects in b, valid JSON.
func nesting(b []byte) int {
	d := json.NewDecoder(bytes.NewReader(b))
	depth, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// FuzzDataIssue holds dataIssue to encoding/json: decoding replaces each
// byte that is not UTF-8 and each unpaired surrogate escape with U+FFFD,
// so, for JSON that spells no U+FFFD itself, dataIssue refuses exactly
// the data whose decoded strings (keys and values) hold a U+FFFD.
func FuzzDataIssue(f *testing.F) {
	for _, s := range []string{`{"k":"\ud800"}`, `{"k":"\ud83d\ude00"}`, `{"k":"\\ud800"}`, `{"\udc00":1}`, `["\ud83d\u0041"]`,
		`"\uDBFF\uDFFF"`, "{\"k\":\"\xff\"}", "\"\xed\xa0\x80\"", "\"caf\xc3\xa9\"", `"\ud83d\ud83d\ude00"`, `"\\\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		lower := bytes.ToLower(b)
		if !json.Valid(b) || bytes.Contains(lower, []byte("ufffd")) || bytes.Contains(b, []byte("\uFFFD")) {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return
		}
		replaced := hasReplacement(v)
		if why := dataIssue(b); (why != "") != replaced {
			t.Fatalf("%q: dataIssue says %q, encoding/json decodes a U+FFFD: %v", b, why, replaced)
		}
	})
}

func hasReplacement(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, utf8.RuneError)
	case []any:
		for _, x := range v {
			if hasReplacement(x) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			if hasReplacement(k) || hasReplacement(x) {
				return true
			}
		}
	}
	return false
}
