package attempt

import (
	"encoding/json"
	"strconv"
	"time"
)

// appendJSON appends r as encoding/json encodes it, byte for byte, without
// reflection: the dispatcher encodes one record per attempt. It reports
// false when a value has no fast path and json.Marshal must encode r (a
// time json refuses, whose error json.Marshal reports).
func (r *Record) appendJSON(b []byte) ([]byte, bool) {
	e := encoder{b: b, ok: true}
	e.str(`{"attempt_id":`, r.AttemptID)
	e.str(`,"delivery_id":`, r.DeliveryID)
	e.str(`,"event_id":`, r.EventID)
	e.str(`,"event_type":`, r.EventType)
	e.str(`,"endpoint_id":`, r.EndpointID)
	e.str(`,"account":`, r.Account)
	e.time(`,"event_created":`, r.EventCreated)
	e.int(`,"attempt":`, int64(r.Attempt))
	e.str(`,"tier":`, r.Tier)
	e.time(`,"started_at":`, r.StartedAt)
	e.int(`,"duration_ns":`, int64(r.Duration))
	if r.StatusCode != 0 {
		e.int(`,"status_code":`, int64(r.StatusCode))
	}
	e.str(`,"outcome":`, string(r.Outcome))
	e.strOmit(`,"error_class":`, r.ErrorClass)
	e.strOmit(`,"error":`, r.Error)
	e.strOmit(`,"response_excerpt":`, r.ResponseExcerpt)
	e.str(`,"next_action":`, string(r.NextAction))
	if !r.NextDueAt.IsZero() {
		e.time(`,"next_due_at":`, r.NextDueAt)
	}
	if r.DLQ != nil {
		e.str(`,"dlq":{"topic":`, r.DLQ.Topic)
		e.int(`,"partition":`, int64(r.DLQ.Partition))
		e.int(`,"offset":`, r.DLQ.Offset)
		e.b = append(e.b, '}')
	}
	e.strOmit(`,"dead_reason":`, r.DeadReason)
	e.strOmit(`,"replay_id":`, r.ReplayID)
	e.strOmit(`,"destination":`, r.Destination)
	e.strOmit(`,"body_sha256":`, r.BodySHA256)
	if r.Source != nil {
		e.str(`,"source":{"topic":`, r.Source.Topic)
		e.int(`,"partition":`, int64(r.Source.Partition))
		e.int(`,"offset":`, r.Source.Offset)
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, '}')
	return e.b, e.ok
}

type encoder struct {
	b  []byte
	ok bool
}

func (e *encoder) strOmit(key, s string) {
	if s != "" {
		e.str(key, s)
	}
}

// str appends key and s as a JSON string: as is when no byte of s needs
// an escape in encoding/json's (HTML-safe) encoding, else by json.Marshal.
func (e *encoder) str(key, s string) {
	e.b = append(e.b, key...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil {
				e.ok = false
				return
			}
			e.b = append(e.b, q...)
			return
		}
	}
	e.b = append(append(append(e.b, '"'), s...), '"')
}

func (e *encoder) int(key string, n int64) {
	e.b = strconv.AppendInt(append(e.b, key...), n, 10)
}

// time appends t as time.Time.MarshalJSON does (RFC 3339 with
// nanoseconds, a 4-digit year, a zone offset under 24h).
func (e *encoder) time(key string, t time.Time) {
	e.b = append(e.b, key...)
	if y := t.Year(); y < 0 || y > 9999 {
		e.ok = false
		return
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		e.ok = false
		return
	}
	e.b = append(t.AppendFormat(append(e.b, '"'), time.RFC3339Nano), '"')
}
