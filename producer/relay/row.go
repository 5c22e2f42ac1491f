package relay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/store"
)

// insertRelation reads a pgoutput insert message ('I', the relation id,
// 'N', the new tuple) and returns its relation id and tuple data.
func insertRelation(data []byte) (uint32, []byte, error) {
	if len(data) < 6 || data[0] != 'I' || data[5] != 'N' {
		return 0, nil, fmt.Errorf("decoding pgoutput insert message: malformed (%d bytes)", len(data))
	}
	return binary.BigEndian.Uint32(data[1:5]), data[6:], nil
}

// decodeInsert reads an outbox row from the tuple data of a pgoutput
// insert, without pglogrepl's copy of every column: id, account and type
// are copied into one string; Payload aliases tuple, so it is valid only
// until the stream's next message (record copies it into the envelope).
func decodeInsert(rel *pglogrepl.RelationMessage, tuple []byte, types *pgtype.Map) (store.OutboxRow, error) {
	var row store.OutboxRow
	if len(tuple) < 2 || int(binary.BigEndian.Uint16(tuple)) != len(rel.Columns) {
		return row, errors.New("insert tuple does not match the outbox relation")
	}
	var id, account, typ, tp []byte
	seen := 0
	rest := tuple[2:]
	for _, c := range rel.Columns {
		kind, data, tail, err := nextColumn(rest)
		if err != nil {
			return row, err
		}
		rest = tail
		name := c.Name
		if kind != pglogrepl.TupleDataTypeText {
			switch name {
			case "id", "account", "type":
				return row, fmt.Errorf("outbox column %s is not text in the WAL (kind %q)", name, kind)
			}
			continue
		}
		switch name {
		case "id":
			id = data
			seen++
		case "account":
			account = data
			seen++
		case "type":
			typ = data
			seen++
		case "payload":
			row.Payload = data
		case "traceparent":
			tp = data
		case "created_at":
			if row.CreatedAt, err = timestamptz(data, types); err != nil {
				return row, err
			}
		}
	}
	if seen != 3 {
		return row, errors.New("outbox insert lacks id, account or type")
	}
	row.ID, row.Account, row.Type = strings3(id, account, typ)
	if len(tp) > 0 {
		row.Traceparent = string(tp)
	}
	return row, nil
}

// nextColumn reads one column of tuple data: its kind and, for text or
// binary, its bytes; tail is what follows.
func nextColumn(b []byte) (kind uint8, data, tail []byte, err error) {
	if len(b) < 1 {
		return 0, nil, nil, errors.New("insert tuple is truncated")
	}
	kind, b = b[0], b[1:]
	switch kind {
	case pglogrepl.TupleDataTypeText, pglogrepl.TupleDataTypeBinary:
		if len(b) < 4 {
			return 0, nil, nil, errors.New("insert tuple is truncated")
		}
		n := binary.BigEndian.Uint32(b)
		if uint64(n) > uint64(len(b)-4) {
			return 0, nil, nil, errors.New("insert tuple is truncated")
		}
		return kind, b[4 : 4+n], b[4+n:], nil
	}
	return kind, nil, b, nil
}

// strings3 copies a, b and c out in one allocation.
func strings3(a, b, c []byte) (string, string, string) {
	var sb strings.Builder
	sb.Grow(len(a) + len(b) + len(c))
	sb.Write(a)
	sb.Write(b)
	sb.Write(c)
	s := sb.String()
	return s[:len(a)], s[len(a) : len(a)+len(b)], s[len(a)+len(b):]
}

// timestamptz reads a timestamptz column's text: Postgres's ISO output
// ("2026-12-01 11:15:57.123456+00") by hand, anything else (another
// DateStyle, BC, infinity, which yields the zero time) through pgtype.
func timestamptz(text []byte, types *pgtype.Map) (time.Time, error) {
	if t, ok := parseISOTimestamptz(text); ok {
		return t, nil
	}
	var ts pgtype.Timestamptz
	if err := types.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, text, &ts); err != nil {
		return time.Time{}, fmt.Errorf("outbox created_at %q: %w", text, err)
	}
	return ts.Time, nil
}

// parseISOTimestamptz parses "YYYY-MM-DD HH:MM:SS[.fraction]±HH[:MM[:SS]]"
// (the fraction 1 to 6 digits) into a time in UTC; false for anything
// else, or a field out of range (year 0 among them: pgtype refuses it).
func parseISOTimestamptz(b []byte) (time.Time, bool) {
	if len(b) < len("2006-01-02 15:04:05+00") || b[4] != '-' || b[7] != '-' || b[10] != ' ' || b[13] != ':' || b[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digitsN(b[0:4])
	month, ok2 := digitsN(b[5:7])
	day, ok3 := digitsN(b[8:10])
	hour, ok4 := digitsN(b[11:13])
	minute, ok5 := digitsN(b[14:16])
	sec, ok6 := digitsN(b[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || year < 1 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	rest, nsec := b[19:], 0
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && '0' <= rest[n] && rest[n] <= '9' {
			n++
		}
		if n == 1 || n > 7 {
			return time.Time{}, false // Postgres writes 1 to 6 digits
		}
		nsec, _ = digitsN(rest[1:n])
		for range 10 - n {
			nsec *= 10
		}
		rest = rest[n:]
	}
	offset, ok := parseOffset(rest)
	if !ok {
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day {
		return time.Time{}, false // February 30th and the like
	}
	return t.Add(-time.Duration(offset) * time.Second), true
}

// parseOffset parses "±HH[:MM[:SS]]" into seconds east of UTC.
func parseOffset(b []byte) (int, bool) {
	if len(b) != 3 && len(b) != 6 && len(b) != 9 || b[0] != '+' && b[0] != '-' {
		return 0, false
	}
	secs := 0
	for i, unit := range []int{3600, 60, 1} {
		at := 1 + 3*i
		if at >= len(b) {
			break
		}
		if i > 0 && b[at-1] != ':' {
			return 0, false
		}
		v, ok := digitsN(b[at : at+2])
		if !ok || i > 0 && v > 59 {
			return 0, false
		}
		secs += v * unit
	}
	if b[0] == '-' {
		secs = -secs
	}
	return secs, true
}

// digitsN parses b, all decimal digits, as a number.
func digitsN(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// outboxSource is the value of every relay record's HeaderSource; records
// share it, read-only.
var outboxSource = []byte("outbox")

// recordAlloc is a record with room for its headers, allocated together.
type recordAlloc struct {
	rec     kgo.Record
	headers [3]kgo.RecordHeader
}

// record renders an outbox row as an event envelope record, keyed by its
// account, with the headers a starting leader looks for: three
// allocations, the envelope, the record and one buffer for the key and
// the header values.
func (r *Relay) record(row store.OutboxRow, o origin) (*kgo.Record, error) {
	v, err := event.Marshal(event.Envelope{ID: row.ID, Account: row.Account, Type: row.Type, Data: row.Payload, Created: row.CreatedAt})
	if err != nil {
		return nil, fmt.Errorf("outbox row %s: %w", row.ID, err)
	}
	buf := make([]byte, 0, len(row.Account)+len(row.ID)+len("FFFFFFFF/FFFFFFFF"))
	buf = append(buf, row.Account...)
	key := buf[:len(buf):len(buf)]
	buf = append(buf, row.ID...)
	id := buf[len(key):len(buf):len(buf)]
	lsn := appendLSN(buf, o.lsn)[len(buf):]
	a := &recordAlloc{}
	a.headers = [3]kgo.RecordHeader{{Key: HeaderSource, Value: outboxSource}, {Key: HeaderLSN, Value: lsn}, {Key: HeaderOutboxID, Value: id}}
	a.rec = kgo.Record{Topic: r.cfg.EventsTopic, Key: key, Value: v, Headers: a.headers[:]}
	return &a.rec, nil
}

// appendLSN appends lsn as pglogrepl.LSN.String writes it ("16/B374D848").
func appendLSN(b []byte, lsn pglogrepl.LSN) []byte {
	b = appendHex(b, uint32(lsn>>32))
	b = append(b, '/')
	return appendHex(b, uint32(lsn))
}

// appendHex appends v in upper-case hexadecimal without leading zeros.
func appendHex(b []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var tmp [8]byte
	i := len(tmp)
	for {
		i--
		tmp[i] = digits[v&0xF]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(b, tmp[i:]...)
}
