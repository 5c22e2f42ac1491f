package attempt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Intent is one request about to be sent, as its intent record names it:
// enough for the dispatcher that resumes its partition to find the
// delivery record again (Source) and make, from it, the request's attempt
// record of outcome unknown. The delivery's own fields (ids, account,
// event) are not repeated: they are in the delivery record, which an
// unfinished request's partition still holds past its committed offset.
type Intent struct {
	AttemptID string   `json:"attempt_id"`
	Source    Position `json:"source"`
	// Attempt is the attempt number (a FIFO endpoint's delivery is
	// attempted again in place: its record's number is its first).
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	// Destination is the endpoint URL the request goes to.
	Destination string `json:"destination"`
}

// Validate reports an intent its resumer could not use.
func (in *Intent) Validate() error {
	switch {
	case in.AttemptID == "":
		return errors.New("intent: no attempt_id")
	case in.Source.Topic == "" || in.Source.Partition < 0 || in.Source.Offset < 0:
		return errors.New("intent: no source position")
	case in.Attempt < 0:
		return fmt.Errorf("intent: attempt %d is negative", in.Attempt)
	case in.StartedAt.IsZero():
		return errors.New("intent: no started_at")
	}
	return nil
}

// intentBatch is an intent record's value.
type intentBatch struct {
	Intents []*Intent `json:"intents"`
}

// IntentBatch encodes ins, requests about to be sent, as one intent record
// for topic: {"intents":[...]}, marked with IntentHeader and without a
// key. A dispatcher writes the intents of the requests it starts together
// into one record, so the per-record cost of producing, storing and
// reading back is paid once per batch.
func IntentBatch(topic string, ins []*Intent) (*kgo.Record, error) {
	sp := scratches.Get().(*[]byte)
	defer scratches.Put(sp)
	e := encoder{b: append((*sp)[:0], `{"intents":[`...), ok: true}
	for i, in := range ins {
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("intent %d: %w", i, err)
		}
		if i > 0 {
			e.b = append(e.b, ',')
		}
		in.appendJSON(&e)
	}
	e.b = append(e.b, "]}"...)
	*sp = e.b[:0] // keep what it grew to
	v := e.b
	if !e.ok {
		var err error
		if v, err = json.Marshal(intentBatch{Intents: ins}); err != nil {
			return nil, fmt.Errorf("encoding intents: %w", err)
		}
	}
	return &kgo.Record{Topic: topic, Value: bytes.Clone(v), Headers: []kgo.RecordHeader{{Key: IntentHeader}}}, nil
}

// appendJSON appends in as encoding/json encodes it (e.ok false when a
// value has no fast path).
func (in *Intent) appendJSON(e *encoder) {
	e.str(`{"attempt_id":`, in.AttemptID)
	e.str(`,"source":{"topic":`, in.Source.Topic)
	e.int(`,"partition":`, int64(in.Source.Partition))
	e.int(`,"offset":`, in.Source.Offset)
	e.int(`},"attempt":`, int64(in.Attempt))
	e.time(`,"started_at":`, in.StartedAt)
	e.str(`,"destination":`, in.Destination)
	e.b = append(e.b, '}')
}

// DecodeIntents reads an intent record: {"intents":[...]} (IntentBatch),
// or, as older dispatchers wrote them, a JSON array of whole attempt
// records of outcome unknown, or a single one; those are read as the
// intents they stand for. An intent that cannot be used fails the whole
// record; one of a dispatcher before sources (no source) is left out.
func DecodeIntents(kr *kgo.Record) ([]Intent, error) {
	v := bytes.TrimLeft(kr.Value, " \t\r\n")
	if len(v) > 0 && v[0] == '[' {
		return decodeRecordIntents(v)
	}
	var b struct {
		Intents *[]Intent `json:"intents"`
	}
	if err := json.Unmarshal(v, &b); err != nil {
		return nil, fmt.Errorf("decoding intent record: %w", err)
	}
	if b.Intents == nil {
		r, err := Decode(kr)
		if err != nil {
			return nil, err
		}
		return recordIntents([]*Record{r})
	}
	for i := range *b.Intents {
		if err := (*b.Intents)[i].Validate(); err != nil {
			return nil, fmt.Errorf("intent %d: %w", i, err)
		}
	}
	return *b.Intents, nil
}

// decodeRecordIntents reads a JSON array of attempt records.
func decodeRecordIntents(v []byte) ([]Intent, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(v, &raws); err != nil {
		return nil, fmt.Errorf("decoding intent record: %w", err)
	}
	recs := make([]*Record, len(raws))
	for i, raw := range raws {
		r, err := Decode(&kgo.Record{Value: raw})
		if err != nil {
			return nil, fmt.Errorf("intent %d: %w", i, err)
		}
		recs[i] = r
	}
	return recordIntents(recs)
}

// recordIntents are the intents that attempt records written in advance
// stand for, but those without a source; one that cannot be used (a
// source without a topic, say) fails them all, as in DecodeIntents.
func recordIntents(recs []*Record) ([]Intent, error) {
	out := make([]Intent, 0, len(recs))
	for i, r := range recs {
		if r.Source == nil {
			continue
		}
		in := Intent{AttemptID: r.AttemptID, Source: *r.Source, Attempt: r.Attempt,
			StartedAt: r.StartedAt, Destination: r.Destination}
		if err := in.Validate(); err != nil {
			return nil, fmt.Errorf("intent %d: %w", i, err)
		}
		out = append(out, in)
	}
	return out, nil
}
