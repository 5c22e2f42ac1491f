package store

import (
	"encoding/binary"
	"math"
	"time"
)

// copyBinary builds the stream of a COPY ... FROM STDIN (FORMAT binary)
// by hand: the attempt-log writer stages every attempt with one, and
// pgx's general path (a []any per row, each value boxed and encoded
// through its type map) cost a sixth of the writer's CPU (issue 15). The
// format: a signature and two zero words, then per tuple its field count
// and each field as a length (-1 for NULL) and its value in the type's
// binary send format, then -1.
type copyBinary struct {
	b []byte
}

// copySignature starts every binary COPY stream: the signature, the flags
// word and the header extension length.
const copySignature = "PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// pgEpochMicros is 2000-01-01 UTC, where Postgres timestamps count from,
// in microseconds since the Unix epoch.
const pgEpochMicros = 946684800 * 1_000_000

func newCopyBinary(size int) *copyBinary {
	c := &copyBinary{b: make([]byte, 0, size)}
	c.b = append(c.b, copySignature...)
	return c
}

// tuple starts a tuple of n fields.
func (c *copyBinary) tuple(n int) { c.b = binary.BigEndian.AppendUint16(c.b, uint16(n)) }

func (c *copyBinary) null() { c.b = binary.BigEndian.AppendUint32(c.b, math.MaxUint32) }

func (c *copyBinary) text(s string) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

// nullText is NULL for "", else text.
func (c *copyBinary) nullText(s string) {
	if s == "" {
		c.null()
		return
	}
	c.text(s)
}

func (c *copyBinary) int4(v int32) {
	c.b = binary.BigEndian.AppendUint32(c.b, 4)
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(v))
}

func (c *copyBinary) int8(v int64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(v))
}

// timestamptz is t as microseconds since 2000-01-01 UTC, truncated as pgx
// truncates.
func (c *copyBinary) timestamptz(t time.Time) {
	c.int8(t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - pgEpochMicros)
}

// end closes the stream and returns it.
func (c *copyBinary) end() []byte {
	c.b = binary.BigEndian.AppendUint16(c.b, math.MaxUint16)
	return c.b
}
