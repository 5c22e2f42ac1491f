package attempt

import (
	"bytes"
	"strconv"
	"time"
)

// decodeFast decodes data as json.Unmarshal would into a zero Record, when
// data is exactly what appendJSON writes (its keys in its order, no
// whitespace) and no string holds an escape: the attempt-log writer decodes
// one record per attempt, and encoding/json's reflection was two thirds of
// its CPU. It reports false for anything else (escapes, other key orders,
// records from older or foreign producers, values out of range), which
// json.Unmarshal then decodes, so the result never differs.
func decodeFast(data []byte) (Record, bool) {
	d := decoder{b: data, s: string(data), ok: true}
	var r Record
	d.lit(`{"attempt_id":`)
	r.AttemptID = d.str()
	d.lit(`,"delivery_id":`)
	r.DeliveryID = d.str()
	d.lit(`,"event_id":`)
	r.EventID = d.str()
	d.lit(`,"event_type":`)
	r.EventType = d.str()
	d.lit(`,"endpoint_id":`)
	r.EndpointID = d.str()
	d.lit(`,"account":`)
	r.Account = d.str()
	d.lit(`,"event_created":`)
	r.EventCreated = d.time()
	d.lit(`,"attempt":`)
	r.Attempt = int(d.int(64))
	d.lit(`,"tier":`)
	r.Tier = d.str()
	d.lit(`,"started_at":`)
	r.StartedAt = d.time()
	d.lit(`,"duration_ns":`)
	r.Duration = time.Duration(d.int(64))
	if d.opt(`,"status_code":`) {
		r.StatusCode = int(d.int(64))
	}
	d.lit(`,"outcome":`)
	r.Outcome = Outcome(d.str())
	if d.opt(`,"error_class":`) {
		r.ErrorClass = d.str()
	}
	if d.opt(`,"error":`) {
		r.Error = d.str()
	}
	if d.opt(`,"response_excerpt":`) {
		r.ResponseExcerpt = d.str()
	}
	d.lit(`,"next_action":`)
	r.NextAction = NextAction(d.str())
	if d.opt(`,"next_due_at":`) {
		r.NextDueAt = d.time()
	}
	if d.opt(`,"dlq":{"topic":`) {
		r.DLQ = d.position()
	}
	if d.opt(`,"dead_reason":`) {
		r.DeadReason = d.str()
	}
	if d.opt(`,"replay_id":`) {
		r.ReplayID = d.str()
	}
	if d.opt(`,"destination":`) {
		r.Destination = d.str()
	}
	if d.opt(`,"body_sha256":`) {
		r.BodySHA256 = d.str()
	}
	if d.opt(`,"source":{"topic":`) {
		r.Source = d.position()
	}
	d.lit(`}`)
	return r, d.ok && len(d.b) == 0
}

// position consumes the rest of a Position object, after its topic key.
func (d *decoder) position() *Position {
	p := &Position{Topic: d.str()}
	d.lit(`,"partition":`)
	p.Partition = int32(d.int(32))
	d.lit(`,"offset":`)
	p.Offset = d.int(64)
	d.lit(`}`)
	return p
}

// decoder reads data front to back; ok turns false at the first byte it
// does not expect, and every read after that is a no-op. The strings it
// returns share s, one copy of data.
type decoder struct {
	b  []byte
	s  string
	ok bool
}

// lit consumes s, which must come next.
func (d *decoder) lit(s string) {
	if d.ok && len(d.b) >= len(s) && string(d.b[:len(s)]) == s {
		d.b = d.b[len(s):]
		return
	}
	d.ok = false
}

// opt consumes s if it comes next.
func (d *decoder) opt(s string) bool {
	if d.ok && len(d.b) >= len(s) && string(d.b[:len(s)]) == s {
		d.b = d.b[len(s):]
		return true
	}
	return false
}

// str consumes a JSON string without escapes, control bytes or non-ASCII
// bytes (json.Unmarshal replaces invalid UTF-8; those go the slow way).
func (d *decoder) str() string {
	if !d.ok || len(d.b) == 0 || d.b[0] != '"' {
		d.ok = false
		return ""
	}
	end := bytes.IndexByte(d.b[1:], '"')
	if end < 0 {
		d.ok = false
		return ""
	}
	s := d.b[1 : 1+end]
	for _, c := range s {
		if c < 0x20 || c >= 0x80 || c == '\\' {
			d.ok = false
			return ""
		}
	}
	from := len(d.s) - len(d.b) + 1
	d.b = d.b[end+2:]
	return d.s[from : from+end]
}

// int consumes a JSON integer that fits bits bits.
func (d *decoder) int(bits int) int64 {
	if !d.ok {
		return 0
	}
	n := 0
	for n < len(d.b) && (d.b[n] == '-' || d.b[n] >= '0' && d.b[n] <= '9') {
		n++
	}
	v, err := strconv.ParseInt(string(d.b[:n]), 10, bits)
	if err != nil || n > 1 && (d.b[0] == '0' || d.b[0] == '-' && d.b[1] == '0') {
		d.ok = false // not a number json reads the same way (a leading zero)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// time consumes a JSON string as time.Time.UnmarshalJSON reads it.
func (d *decoder) time() time.Time {
	if !d.ok || len(d.b) == 0 || d.b[0] != '"' {
		d.ok = false
		return time.Time{}
	}
	end := bytes.IndexByte(d.b[1:], '"')
	if end < 0 {
		d.ok = false
		return time.Time{}
	}
	var t time.Time
	if err := t.UnmarshalJSON(d.b[:end+2]); err != nil {
		d.ok = false
		return time.Time{}
	}
	d.b = d.b[end+2:]
	return t
}
