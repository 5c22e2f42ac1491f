package event

import "time"

// marshalFast is Marshal's fast path, without reflection (data is read
// twice: validated, then copied): it writes what json.Marshal writes for
// the wire struct, byte for byte. It
// declines (ok == false, and Marshal takes marshalGeneral) whenever a
// string field needs escaping (anything but printable ASCII, or one of
// " \ < > &) and whenever data is not valid JSON or nests deeper than
// maxFastDepth; data it takes it compacts and HTML-escapes exactly as
// json.Marshal does a json.RawMessage (FuzzMarshalFast holds it to that).
func marshalFast(e Envelope) (b []byte, ok bool) {
	if !plainASCII(e.ID) || !plainASCII(e.Account) || !plainASCII(e.Type) {
		return nil, false
	}
	data := e.Data
	if len(data) == 0 {
		data = []byte("{}")
	}
	if !validJSON(data) {
		return nil, false
	}
	// Room for a few escapes in data, too.
	b = make([]byte, 0, len(`{"id":"","account":"","type":"","data":,"created":""}`)+
		len(e.ID)+len(e.Account)+len(e.Type)+len(data)+len(time.RFC3339Nano)+32)
	b = append(b, '{')
	if e.ID != "" {
		b = append(b, `"id":"`...)
		b = append(b, e.ID...)
		b = append(b, `",`...)
	}
	b = append(b, `"account":"`...)
	b = append(b, e.Account...)
	b = append(b, `","type":"`...)
	b = append(b, e.Type...)
	b = append(b, `","data":`...)
	b = appendCompact(b, data)
	if !e.Created.IsZero() {
		// RFC 3339 needs no escaping, whatever the year.
		b = append(b, `,"created":"`...)
		b = e.Created.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}'), true
}

// plainASCII reports whether json.Marshal writes s between quotes as it
// is: printable ASCII without " \ < > & (the HTML characters it escapes).
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < ' ' || c > '~', c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// validJSON reports whether b is one JSON value (with optional white space
// around it) by encoding/json's grammar, nesting at most maxFastDepth.
func validJSON(b []byte) bool {
	s := scanner{b: b}
	s.skipSpace()
	if !s.value(0) {
		return false
	}
	s.skipSpace()
	return s.i == len(b)
}

// appendCompact appends src, valid JSON, as json.Marshal writes a
// json.RawMessage: without white space outside strings, and with <, >, &,
// U+2028 and U+2029 escaped as \u003c, \u003e, \u0026, \u2028, \u2029.
// Bytes that are not UTF-8 are kept as they are, as json.Marshal keeps
// them.
func appendCompact(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	start, inString := 0, false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if !inString {
			switch c {
			case ' ', '\t', '\n', '\r':
				dst = append(dst, src[start:i]...)
				start = i + 1
			case '"':
				inString = true
			}
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			i++ // the escaped character: none needs escaping
		case '<', '>', '&':
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		case 0xE2:
			if i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8 {
				dst = append(dst, src[start:i]...)
				dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
				start = i + 3
				i += 2
			}
		}
	}
	return append(dst, src[start:]...)
}
