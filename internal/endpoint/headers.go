package endpoint

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on an endpoint's custom headers.
const (
	MaxHeaders        = 20
	MaxHeaderNameLen  = 256
	MaxHeaderValueLen = 1024
)

// hopByHop are the hop-by-hop headers of RFC 9110 section 7.6.1 (and the
// older Keep-Alive): they describe one connection, which the dispatcher's
// transport owns, not the request.
var hopByHop = []string{"connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade"}

// ReservedHeader reports whether name (any case) is one an endpoint may
// not set: webhook-* (the signature would stop meaning anything),
// content-* (the body is sent unchanged as JSON), host and user-agent
// (hookd's identity on the wire), and the hop-by-hop headers, proxy-*
// included.
func ReservedHeader(name string) bool {
	n := strings.ToLower(name)
	for _, p := range []string{"webhook-", "content-", "proxy-"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return n == "host" || n == "user-agent" || slices.Contains(hopByHop, n)
}

// validHeaderName reports whether s is an RFC 9110 token: 1 or more of
// the tchar characters.
func validHeaderName(s string) bool {
	if s == "" || len(s) > MaxHeaderNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue checks s as an RFC 9110 field value that Postgres's
// jsonb can hold: valid UTF-8, no control character but tab (so no CR, LF
// or NUL), no leading or trailing space or tab.
func validHeaderValue(s string) error {
	switch {
	case len(s) > MaxHeaderValueLen:
		return fmt.Errorf("at most %d bytes, got %d", MaxHeaderValueLen, len(s))
	case !utf8.ValidString(s):
		return fmt.Errorf("not valid UTF-8")
	case strings.ContainsFunc(s, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }):
		return fmt.Errorf("must not contain CR, LF, NUL or other control characters")
	case s != strings.Trim(s, " \t"):
		return fmt.Errorf("must not start or end with a space or tab")
	}
	return nil
}

// ValidateHeaders checks an endpoint's custom headers: at most MaxHeaders,
// names RFC 9110 tokens of at most MaxHeaderNameLen bytes, no two names
// equal but for case, values valid field values of at most
// MaxHeaderValueLen bytes, and no reserved name (ReservedHeader). The
// error names every reserved header given, so one 400 tells the caller
// all it must drop. The API, hookctl, the portal and the store use this
// rule.
func ValidateHeaders(h map[string]string) error {
	if len(h) > MaxHeaders {
		return invalid("headers: at most %d, got %d", MaxHeaders, len(h))
	}
	names := make([]string, 0, len(h))
	for n := range h {
		names = append(names, n)
	}
	slices.Sort(names) // deterministic messages
	var reserved []string
	seen := make(map[string]string, len(h))
	for _, n := range names {
		if !validHeaderName(n) {
			return invalid("headers: name %q: must be 1..%d characters of letters, digits and !#$%%&'*+-.^_`|~ (an HTTP token)", clip(n), MaxHeaderNameLen)
		}
		if prev, ok := seen[strings.ToLower(n)]; ok {
			return invalid("headers: %s and %s are the same header (names are case-insensitive)", prev, n)
		}
		seen[strings.ToLower(n)] = n
		if ReservedHeader(n) {
			reserved = append(reserved, n)
		}
	}
	if len(reserved) > 0 {
		verb := "are"
		if len(reserved) == 1 {
			verb = "is"
		}
		return invalid("headers: %s %s reserved: hookd sets webhook-*, content-*, host and user-agent itself, "+
			"and hop-by-hop headers (connection, keep-alive, proxy-*, te, trailer, transfer-encoding, upgrade) cannot be set",
			strings.Join(reserved, ", "), verb)
	}
	for _, n := range names {
		if err := validHeaderValue(h[n]); err != nil {
			return invalid("headers: value of %s: %v", n, err)
		}
	}
	return nil
}

// ParseHeaderLine reads one "Name: value" line (hookctl --header, a line
// of the portal's form) into its name and value, both trimmed of spaces
// and tabs. It checks the syntax only; ValidateHeaders judges the set.
func ParseHeaderLine(line string) (name, value string, err error) {
	name, value, ok := strings.Cut(line, ":")
	name = strings.Trim(name, " \t")
	if !ok || name == "" {
		return "", "", invalid("header %q: must be \"Name: value\"", clip(line))
	}
	return name, strings.Trim(value, " \t"), nil
}
