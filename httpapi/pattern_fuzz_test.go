package httpapi

import (
	"strings"
	"testing"

	"github.com/hookd/hookd/endpoint"
)

// validatePattern guards what the API stores as a subscription: never a
// panic, and an accepted pattern has no empty segment and matches itself
// when it has no wildcard.
func FuzzValidatePattern(f *testing.F) {
	for _, s := range []string{"invoice.*", "*", "invoice..paid", "a.b-c_d", "in voice", ".x", "x.", "**"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if validatePattern(p) != nil {
			return
		}
		if strings.Contains(p, "..") || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") {
			t.Fatalf("%q accepted with an empty segment", p)
		}
		if !strings.Contains(p, "*") && !endpoint.MatchType(p, p) {
			t.Fatalf("%q does not match itself", p)
		}
	})
}
