package producer

import (
	"bytes"
	"encoding/json"
)

// jsonbTextLen is the length of a JSON value as Postgres prints it as jsonb
// (payload::text): one space after each ':' and ',', strings escaped as
// escape_json does (", \ and control characters only; everything else as
// UTF-8). Numbers count as written (jsonb may normalise them) and duplicate
// keys count (jsonb keeps the last): the database's trigger has the last
// word. Invalid JSON counts its raw length.
func jsonbTextLen(v []byte) int {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	// Per open container: whether it is an object, and its tokens so far.
	type level struct {
		object bool
		n      int
	}
	var stack []level
	total := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return len(v)
		}
		if len(stack) > 0 {
			top := &stack[len(stack)-1]
			if d, ok := tok.(json.Delim); !ok || (d != '}' && d != ']') {
				switch {
				case top.object && top.n%2 == 1:
					total += 2 // ": "
				case top.n > 0:
					total += 2 // ", "
				}
				top.n++
			}
		}
		switch t := tok.(type) {
		case json.Delim:
			total++
			switch t {
			case '{', '[':
				stack = append(stack, level{object: t == '{'})
			default:
				stack = stack[:len(stack)-1]
			}
		case string:
			total += escapedLen(t)
		case json.Number:
			total += len(t)
		case bool:
			total += 5
			if t {
				total--
			}
		case nil:
			total += 4
		}
		if len(stack) == 0 {
			return total
		}
	}
}

// escapedLen is the length of s quoted as Postgres's escape_json quotes it.
func escapedLen(s string) int {
	n := 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
			n += 2
		case c < 0x20:
			n += 6
		default:
			n++
		}
	}
	return n
}
