package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/producer/event"
)

// Found by FuzzParse with a varying record timestamp: a created time (or
// record timestamp) whose UTC year is outside 0000..9999 was accepted, and
// the envelope hookd wrote back ("-0001-12-31T23:00:00Z") no longer parsed.
func TestParseCreatedOutOfRange(t *testing.T) {
	t.Parallel()
	for _, created := range []string{"0000-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"} {
		_, err := event.Parse([]byte(`{"account":"a","type":"t","created":"`+created+`"}`), origin, 0)
		var ie *event.InvalidError
		require.ErrorAs(t, err, &ie, created)
		require.Equal(t, event.ReasonInvalidCreated, ie.Reason)
	}
	for _, ts := range []time.Time{time.UnixMilli(-62167219200001), time.UnixMilli(253402300800000)} {
		o := origin
		o.Timestamp = ts
		_, err := event.Parse([]byte(`{"account":"a","type":"t"}`), o, 0)
		require.ErrorIs(t, err, event.ErrInvalid, ts.String())
	}
	for _, created := range []string{"0000-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z", "0000-01-01T00:00:00-01:00"} {
		_, err := event.Parse([]byte(`{"account":"a","type":"t","created":"`+created+`"}`), origin, 0)
		require.NoError(t, err, created)
	}
}

// FuzzParse feeds untrusted envelope bytes and record timestamps: never a
// panic; a refusal is a one-line *InvalidError with a reason; an accepted
// envelope has its fields within their documented limits and survives
// Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	ts := origin.Timestamp.UnixMilli()
	for _, s := range []string{
		`{"id":"evt_1","account":"acct_1","type":"invoice.paid","data":{"invoice":"in_1"},"created":"2026-01-02T03:04:05Z"}`,
		`{"account":"a","type":"t"}`, `{"account":"a","type":"t","data":null,"created":null}`,
		`[]`, `{`, `null`, `{"account":"\u00e9","type":"t"}`, `{"account":"a","type":"t","data":{"a":"\ud800"}}`,
		`{"account":"a","type":"t","created":"0000-01-01T00:00:00+01:00"}`,
		`{"account":"a","type":"t","created":"9999-12-31T23:59:59-01:00"}`,
		`{"account":"a","type":"t","created":"2026-01-02T03:04:05.1234567891234Z"}`,
		`{"account":"a","type":"t","data":{"x":"\u0000"},"id":"e\u0000"}`,
		`{"account":"a","type":"in*voice"}`, `{"account":"a","account":"b","type":"t"}`,
		`{"account":"a","type":"t","data":{ "k" : [1, 2] }}`, ` {"account":"a","type":"t"} `,
		`{"account":"a","type":"t","id":""}`, `{"account":1,"type":"t"}`, `{"account":"a","type":"t","data":"{}"}`,
	} {
		f.Add([]byte(s), ts)
	}
	f.Add([]byte(`{"account":"a","type":"t"}`), int64(-62167219200001))
	f.Add([]byte(`{"account":"a","type":"t"}`), int64(253402300800000))
	f.Fuzz(func(t *testing.T, raw []byte, tsMillis int64) {
		o := origin
		o.Timestamp = time.UnixMilli(tsMillis)
		env, err := event.Parse(raw, o, 4096)
		if err != nil {
			var ie *event.InvalidError
			if !errors.As(err, &ie) || ie.Reason == "" || strings.Contains(ie.Error(), "\n") || len(ie.Error()) > 1000 {
				t.Fatalf("bad error for %q: %v", raw, err)
			}
			return
		}
		checkEnvelope(t, env)
		b, err := event.Marshal(env)
		if err != nil {
			t.Fatalf("marshal of a parsed envelope: %v", err)
		}
		again, err := event.Parse(b, origin, 1<<20)
		if err != nil {
			t.Fatalf("re-parse of %q (from %q): %v", b, raw, err)
		}
		if again.ID != env.ID || again.Account != env.Account || again.Type != env.Type || !again.Created.Equal(env.Created) ||
			!sameJSON(again.Data, env.Data) {
			t.Fatalf("round trip changed the envelope: %+v vs %+v", env, again)
		}
	})
}

func checkEnvelope(t *testing.T, env event.Envelope) {
	t.Helper()
	if env.ID == "" || env.Account == "" || env.Type == "" || env.Created.IsZero() {
		t.Fatalf("accepted envelope with an empty field: %+v", env)
	}
	for name, s := range map[string]string{"id": env.ID, "account": env.Account, "type": env.Type} {
		if len(s) > 255 {
			t.Fatalf("%s of %d bytes accepted", name, len(s))
		}
		for i := 0; i < len(s); i++ {
			if s[i] <= ' ' || s[i] > '~' {
				t.Fatalf("%s %q accepted with byte %#x", name, s, s[i])
			}
		}
	}
	if strings.Contains(env.Type, "*") {
		t.Fatalf("type %q accepted with a wildcard", env.Type)
	}
	if !json.Valid(env.Data) || env.Data[0] != '{' || !utf8.Valid(env.Data) {
		t.Fatalf("accepted non-object or non-UTF-8 data %q", env.Data)
	}
	if y := env.Created.Year(); y < 0 || y > 9999 || env.Created.Location() != time.UTC {
		t.Fatalf("accepted created %s", env.Created)
	}
}

// sameJSON reports whether a and b hold the same JSON value (Marshal may
// re-encode data: compacted, HTML characters escaped).
func sameJSON(a, b []byte) bool {
	var va, vb any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	return da.Decode(&va) == nil && db.Decode(&vb) == nil && reflect.DeepEqual(va, vb)
}
