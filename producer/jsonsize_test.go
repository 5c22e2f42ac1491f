package producer

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/pgtest"
)

// TestJSONBTextLenMatchesPostgres compares the Go count with what the
// database measures for the outbox limit: octet_length(payload::text).
func TestJSONBTextLenMatchesPostgres(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for _, v := range []string{
		`{}`, `[]`, `{"a":1}`, `{"a":[1,2,{"b":null}],"c":true,"d":false}`, `{ "spaced" : [ 1 , 2 ] }`,
		`{"s":"quote \" backslash \\ tab \t nl \n cr \r ff \f bs \b ctl \u0001 \u001f"}`,
		`{"html":"<a href=\"x\">&amp;</a>","u":"\u00e9\u4e2d😀","esc":"\u003c\/"}`,
		`{"n":[-1.50,0,12345678901234567890,3.14]}`, `{"nested":{"a":{"b":{"c":[[],[{}]]}}}}`,
		`{"big":"` + strings.Repeat("x", 5000) + `"}`, `[1,"two",{"3":[4]}]`, `"just a string"`, `42`,
	} {
		var want int
		require.NoError(t, db.Store.Pool().QueryRow(context.Background(), `SELECT octet_length($1::jsonb::text)`, v).Scan(&want))
		require.Equal(t, want, jsonbTextLen([]byte(v)), "%s", v)
	}
	require.Equal(t, len("{not json"), jsonbTextLen([]byte("{not json")))
}
