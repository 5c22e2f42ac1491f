package event_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/producer/event"
)

var origin = event.Origin{Topic: "webhooks.events", Partition: 3, Offset: 42, Timestamp: time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)}

func TestParseValid(t *testing.T) {
	t.Parallel()
	env, err := event.Parse([]byte(`{"id":"evt_1","account":"acct_1","type":"invoice.paid","data":{"invoice":"in_1"},"created":"2026-01-02T03:04:05.5+01:00"}`), origin, 0)
	require.NoError(t, err)
	require.Equal(t, "evt_1", env.ID)
	require.Equal(t, "acct_1", env.Account)
	require.Equal(t, "invoice.paid", env.Type)
	require.JSONEq(t, `{"invoice":"in_1"}`, string(env.Data))
	require.Equal(t, time.Date(2026, 1, 2, 2, 4, 5, 500_000_000, time.UTC), env.Created)
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	raw := []byte(` {"account":"acct_1","type":"invoice.paid","extra":true} `)
	a, err := event.Parse(raw, origin, 0)
	require.NoError(t, err)
	require.Equal(t, event.DeriveID(origin), a.ID)
	require.True(t, strings.HasPrefix(a.ID, "evt_"))
	require.Equal(t, origin.Timestamp, a.Created, "created defaults to the record timestamp")
	require.Equal(t, `{}`, string(a.Data))

	// A re-read of the same record gives the same id; another offset does not.
	b, err := event.Parse(raw, origin, 0)
	require.NoError(t, err)
	require.Equal(t, a.ID, b.ID)
	other := origin
	other.Offset++
	c, err := event.Parse(raw, other, 0)
	require.NoError(t, err)
	require.NotEqual(t, a.ID, c.ID)
}

func TestParseInvalid(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		raw  string
		want event.Reason
	}{
		"empty":              {``, event.ReasonInvalidJSON},
		"not json":           {`hello`, event.ReasonInvalidJSON},
		"array":              {`[1,2]`, event.ReasonInvalidJSON},
		"truncated":          {`{"account":"a","type":"t"`, event.ReasonInvalidJSON},
		"trailing garbage":   {`{"account":"a","type":"t"} x`, event.ReasonInvalidJSON},
		"no account":         {`{"type":"t"}`, event.ReasonMissingAccount},
		"empty account":      {`{"account":"","type":"t"}`, event.ReasonMissingAccount},
		"null account":       {`{"account":null,"type":"t"}`, event.ReasonMissingAccount},
		"numeric account":    {`{"account":7,"type":"t"}`, event.ReasonInvalidAccount},
		"account with space": {`{"account":"a b","type":"t"}`, event.ReasonInvalidAccount},
		"no type":            {`{"account":"a"}`, event.ReasonMissingType},
		"type object":        {`{"account":"a","type":{}}`, event.ReasonInvalidType},
		"type wildcard":      {`{"account":"a","type":"invoice.*"}`, event.ReasonInvalidType},
		"long type":          {`{"account":"a","type":"` + strings.Repeat("x", 256) + `"}`, event.ReasonInvalidType},
		"id number":          {`{"id":1,"account":"a","type":"t"}`, event.ReasonInvalidID},
		"id newline":         {`{"id":"a\nb","account":"a","type":"t"}`, event.ReasonInvalidID},
		"data string":        {`{"account":"a","type":"t","data":"x"}`, event.ReasonInvalidData},
		"data array":         {`{"account":"a","type":"t","data":[]}`, event.ReasonInvalidData},
		"created garbage":    {`{"account":"a","type":"t","created":"yesterday"}`, event.ReasonInvalidCreated},
		"created number":     {`{"account":"a","type":"t","created":1700000000}`, event.ReasonInvalidCreated},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := event.Parse([]byte(tc.raw), origin, 0)
			require.Error(t, err)
			require.ErrorIs(t, err, event.ErrInvalid)
			var ie *event.InvalidError
			require.True(t, errors.As(err, &ie))
			require.Equal(t, tc.want, ie.Reason, "detail: %s", ie.Detail)
			require.NotContains(t, ie.Error(), "\n")
		})
	}
}

func TestParseOversize(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"account":"a","type":"t","data":{"x":"` + strings.Repeat("y", 100) + `"}}`)
	_, err := event.Parse(raw, origin, 64)
	var ie *event.InvalidError
	require.ErrorAs(t, err, &ie)
	require.Equal(t, event.ReasonOversize, ie.Reason)
	_, err = event.Parse(raw, origin, len(raw))
	require.NoError(t, err)
}

func TestMarshalRoundTrip(t *testing.T) {
	t.Parallel()
	in := event.Envelope{ID: "e1", Account: "a", Type: "t.x", Data: json.RawMessage(`{"k":[1,2]}`), Created: time.Date(2026, 1, 1, 0, 0, 0, 123, time.UTC)}
	b, err := event.Marshal(in)
	require.NoError(t, err)
	out, err := event.Parse(b, origin, 0)
	require.NoError(t, err)
	require.Equal(t, in, out)
}

// Issue 29: data must be RFC 8259 text. encoding/json takes raw bytes that
// are not UTF-8 and unpaired surrogate escapes, and json.RawMessage passed
// them on to receivers; both are invalid_data now, on the fast path and
// the general one alike. A paired surrogate, an escaped backslash before a
// 'u', and non-ASCII UTF-8 stay valid.
func TestParseDataMustBeUTF8JSON(t *testing.T) {
	t.Parallel()
	for name, data := range map[string]string{
		"raw 0xff":              "{\"k\":\"\xff\"}",
		"truncated sequence":    "{\"k\":\"caf\xc3\"}",
		"encoded surrogate":     "{\"k\":\"\xed\xa0\x80\"}",
		"overlong":              "{\"k\":\"\xc0\xaf\"}",
		"in a key":              "{\"\xff\":1}",
		"lone high surrogate":   `{"k":"\ud800"}`,
		"lone low surrogate":    `{"k":"\udc00"}`,
		"high then not low":     `{"k":"\ud800\u0041"}`,
		"high then high":        `{"k":"\uD83D\uD83D"}`,
		"high at end of string": `{"k":"x\ud83d"}`,
		"deep inside":           `{"a":[{"b":["ok","\udfff"]}]}`,
		"upper case":            `{"k":"\uDBFF"}`,
	} {
		raw := `{"id":"evt_1","account":"a","type":"t","data":` + data + `}`
		_, err := event.Parse([]byte(raw), origin, 0)
		var ie *event.InvalidError
		require.ErrorAs(t, err, &ie, name)
		require.Equal(t, event.ReasonInvalidData, ie.Reason, "%s: %v", name, err)
		require.NotContains(t, ie.Error(), "\n")
	}
	for name, data := range map[string]string{
		"pair":                `{"k":"\ud83d\ude00"}`,
		"pair upper case":     `{"k":"\uD83D\uDE00"}`,
		"escaped backslash":   `{"k":"\\ud800"}`,
		"utf-8":               `{"k":"café 😀"}`,
		"bmp escape":          `{"k":"\u00e9\uffff"}`,
		"surrogate-ish ascii": `{"ud800":"\\\\ud800"}`,
	} {
		raw := `{"id":"evt_1","account":"a","type":"t","data":` + data + `}`
		env, err := event.Parse([]byte(raw), origin, 0)
		require.NoError(t, err, name)
		require.JSONEq(t, data, string(env.Data), name)
	}
}
