package store

import (
	"strings"
	"testing"
)

// cleanAttemptText keeps clean text as it is and otherwise cuts it to
// maxTextLen, replaces invalid UTF-8 (a rune cut at the limit included)
// and drops NUL bytes, which Postgres text cannot hold.
func TestCleanAttemptText(t *testing.T) {
	long := strings.Repeat("a", maxTextLen-1) + "é" // the é is cut in half at maxTextLen
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"connection refused", "connection refused"},
		{"déjà vu", "déjà vu"},
		{"bad\x00gateway", "badgateway"},
		{"bad \xff\xfe here", "bad \uFFFD here"},
		{long, strings.Repeat("a", maxTextLen-1) + "\uFFFD"},
		{strings.Repeat("b", maxTextLen+10), strings.Repeat("b", maxTextLen)},
	} {
		if got := cleanAttemptText(c.in); got != c.want {
			t.Errorf("cleanAttemptText(%.20q...) = %.20q... (len %d), want %.20q... (len %d)", c.in, got, len(got), c.want, len(c.want))
		}
	}
}

func BenchmarkCleanAttemptText(b *testing.B) {
	s := "dial tcp 127.0.0.1:443: connect: connection refused; the endpoint answered 503 Service Unavailable"
	for b.Loop() {
		_ = cleanAttemptText(s)
	}
}
