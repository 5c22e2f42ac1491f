package event

import (
	"bytes"
	"strings"
	"time"
)

// parseFast is Parse's fast path for the common envelope, in one pass
// without reflection: it validates trimmed (which starts with '{') as JSON
// exactly as encoding/json does and picks out the top-level fields. It only
// ever accepts: for an envelope that is invalid, or unusual (an escape in a
// key or in the id, account, type or created string, a field given twice,
// deep nesting, data that dataIssue refuses), it returns ok == false and
// Parse takes parseGeneral, which alone words the errors. So it may decline what is valid but never
// accepts what encoding/json rejects, and what it accepts it parses as
// parseGeneral does (FuzzParseFast holds it to that).
func parseFast(trimmed []byte, o Origin) (env Envelope, ok bool) {
	var f fields
	if !scanEnvelope(trimmed, &f) {
		return env, false
	}
	if !isToken(f.account, MaxAccountLen) || !isToken(f.typ, MaxTypeLen) || bytes.IndexByte(f.typ, '*') >= 0 {
		return env, false
	}
	id := f.id
	if isNull(id) || string(id) == `""` {
		id = nil
	} else if !isToken(id, MaxIDLen) {
		return env, false
	}
	switch {
	case isNull(f.data):
		env.Data = []byte("{}")
	case f.data[0] == '{' && dataIssue(f.data) == "":
		env.Data = bytes.Clone(f.data)
	default:
		return env, false
	}
	if env.Created, ok = created(f.created, o); !ok {
		return env, false
	}
	env.ID, env.Account, env.Type = unquote3(id, f.account, f.typ)
	if env.ID == "" {
		env.ID = DeriveID(o)
	}
	return env, true
}

// created is the envelope's created time (raw is its JSON value, nil when
// absent) in UTC, or false when it is not a plain RFC 3339 string within
// years 0000..9999.
func created(raw []byte, o Origin) (time.Time, bool) {
	var t time.Time
	if isNull(raw) {
		t = o.Timestamp
		if t.IsZero() {
			t = time.Now()
		}
	} else {
		s, ok := plainString(raw)
		if !ok {
			return t, false
		}
		var err error
		if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return t, false
		}
	}
	t = t.UTC()
	if y := t.Year(); y < 0 || y > 9999 {
		return t, false
	}
	return t, true
}

// plainString returns the contents of the JSON string raw if they are
// printable ASCII without escapes: then they are its value.
func plainString(raw []byte) (string, bool) {
	if raw[0] != '"' {
		return "", false
	}
	s := raw[1 : len(raw)-1]
	for _, c := range s {
		if c < ' ' || c > '~' || c == '\\' {
			return "", false
		}
	}
	return string(s), true
}

// isToken reports whether the JSON value raw is a string that stringField
// accepts as is: 1 to maxLen printable ASCII characters without spaces,
// and no escapes.
func isToken(raw []byte, maxLen int) bool {
	if len(raw) < 3 || len(raw)-2 > maxLen || raw[0] != '"' {
		return false
	}
	for _, c := range raw[1 : len(raw)-1] {
		if c <= ' ' || c > '~' || c == '\\' {
			return false
		}
	}
	return true
}

// unquote3 returns the contents of three JSON strings without escapes (nil
// is ""), copied out in one allocation.
func unquote3(a, b, c []byte) (string, string, string) {
	a, b, c = inner(a), inner(b), inner(c)
	var sb strings.Builder
	sb.Grow(len(a) + len(b) + len(c))
	sb.Write(a)
	sb.Write(b)
	sb.Write(c)
	s := sb.String()
	return s[:len(a)], s[len(a) : len(a)+len(b)], s[len(a)+len(b):]
}

func inner(quoted []byte) []byte {
	if len(quoted) < 2 {
		return nil
	}
	return quoted[1 : len(quoted)-1]
}

// fields are the raw JSON values of the envelope's top-level fields, nil
// when absent.
type fields struct {
	id, account, typ, data, created []byte
}

// set records value as the field key; false for a field seen before or a
// key with escapes (it might spell one of them).
func (f *fields) set(key, value []byte, escaped bool) bool {
	if escaped {
		return false
	}
	var p *[]byte
	switch string(key) {
	case "id":
		p = &f.id
	case "account":
		p = &f.account
	case "type":
		p = &f.typ
	case "data":
		p = &f.data
	case "created":
		p = &f.created
	default:
		return true
	}
	if *p != nil {
		return false
	}
	*p = value
	return true
}

// maxFastDepth bounds the nesting the fast path follows; encoding/json
// allows 10000 levels, deeper envelopes take the general path.
const maxFastDepth = 1000

// scanEnvelope validates b, a JSON object, and fills f with its fields.
func scanEnvelope(b []byte, f *fields) bool {
	s := scanner{b: b, i: 1}
	s.skipSpace()
	if s.eat('}') {
		s.skipSpace()
		return s.i == len(b)
	}
	for {
		start := s.i
		if !s.peekIs('"') || !s.str() {
			return false
		}
		key, escaped := b[start+1:s.i-1], s.escaped
		s.skipSpace()
		if !s.eat(':') {
			return false
		}
		s.skipSpace()
		start = s.i
		if !s.value(1) || !f.set(key, b[start:s.i], escaped) {
			return false
		}
		s.skipSpace()
		switch {
		case s.eat(','):
			s.skipSpace()
		case s.eat('}'):
			s.skipSpace()
			return s.i == len(b)
		default:
			return false
		}
	}
}

// scanner checks JSON text with the grammar of encoding/json's scanner.
type scanner struct {
	b []byte
	i int
	// escaped is set by str when the string had a backslash escape.
	escaped bool
}

func (s *scanner) skipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peekIs(c byte) bool { return s.i < len(s.b) && s.b[s.i] == c }

func (s *scanner) eat(c byte) bool {
	if s.peekIs(c) {
		s.i++
		return true
	}
	return false
}

// value scans one value at nesting depth.
func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(depth + 1)
	case c == '[':
		return s.array(depth + 1)
	case c == '"':
		return s.str()
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return false
}

func (s *scanner) object(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	s.i++
	s.skipSpace()
	if s.eat('}') {
		return true
	}
	for {
		if !s.peekIs('"') || !s.str() {
			return false
		}
		s.skipSpace()
		if !s.eat(':') {
			return false
		}
		s.skipSpace()
		if !s.value(depth) {
			return false
		}
		s.skipSpace()
		switch {
		case s.eat(','):
			s.skipSpace()
		case s.eat('}'):
			return true
		default:
			return false
		}
	}
}

func (s *scanner) array(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	s.i++
	s.skipSpace()
	if s.eat(']') {
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.skipSpace()
		switch {
		case s.eat(','):
			s.skipSpace()
		case s.eat(']'):
			return true
		default:
			return false
		}
	}
}

// str scans a string starting at its opening quote.
func (s *scanner) str() bool {
	b, i := s.b, s.i+1
	s.escaped = false
	for i < len(b) {
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c == '\\':
			s.escaped = true
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return false
				}
				i += 6
			default:
				return false
			}
		case c < ' ':
			return false
		default:
			i++
		}
	}
	return false
}

func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return false
	case b[i] == '0':
		i++
	case '1' <= b[i] && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if i+1 >= len(b) || !isDigit(b[i+1]) {
			return false
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return false
		}
		i = digits(b, i)
	}
	s.i = i
	return true
}

func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

// digits returns the index of the first non-digit at or after i.
func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
