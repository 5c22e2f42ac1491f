package event

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// dataIssue says what keeps data, a JSON value that encoding/json's grammar
// accepts, from being RFC 8259 text, or "" when nothing does: bytes that
// are not UTF-8, or an escaped UTF-16 surrogate without its pair
// ("\ud800"). encoding/json accepts both and json.RawMessage passes them on
// unchanged, so hookd would sign and send a body that a receiver's strict
// parser refuses, or decodes into another value than the producer meant.
func dataIssue(data []byte) string {
	if !utf8.Valid(data) {
		return "data is not valid UTF-8"
	}
	for i := 0; ; {
		j := bytes.IndexByte(data[i:], '\\')
		if j < 0 {
			return ""
		}
		i += j
		// data is valid JSON: a backslash is inside a string and starts an
		// escape, \uXXXX with four hex digits when it is a 'u'.
		if data[i+1] != 'u' {
			i += 2
			continue
		}
		r := hex4(data[i+2 : i+6])
		switch {
		case r < 0xD800 || r > 0xDFFF:
			i += 6
		case r < 0xDC00 && i+12 <= len(data) && data[i+6] == '\\' && data[i+7] == 'u' && isLowSurrogate(hex4(data[i+8:i+12])):
			i += 12
		default:
			return fmt.Sprintf(`data has an unpaired UTF-16 surrogate \u%04x at byte %d`, r, i)
		}
	}
}

func isLowSurrogate(r rune) bool { return 0xDC00 <= r && r <= 0xDFFF }

// hex4 reads four hex digits (already checked) as a code unit.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
