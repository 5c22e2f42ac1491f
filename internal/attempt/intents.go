package attempt

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Intent is one request of an intent record.
type Intent struct {
	*Record
	// Value is the request's attempt record as JSON: what goes to the
	// attempts topic, as is, when no attempt record follows the intent.
	Value []byte
}

// IntentBatch encodes recs, requests about to be sent (outcome unknown),
// as one intent record for topic: a JSON array of their attempt records,
// marked with IntentHeader and without a key. A dispatcher writes the
// intents of the requests it starts together into one record, so the
// per-record cost of producing, storing and reading back is paid once
// per batch.
func IntentBatch(topic string, recs []*Record) (*kgo.Record, error) {
	sp := scratches.Get().(*[]byte)
	defer scratches.Put(sp)
	b := append((*sp)[:0], '[')
	for i, r := range recs {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("intent %d: %w", i, err)
		}
		if i > 0 {
			b = append(b, ',')
		}
		v, ok := r.appendJSON(b)
		if !ok {
			c := *r // json.Marshal keeps its argument: r itself stays off the heap
			j, err := json.Marshal(&c)
			if err != nil {
				return nil, fmt.Errorf("encoding intent %d: %w", i, err)
			}
			v = append(b, j...)
		}
		b = v
	}
	b = append(b, ']')
	*sp = b[:0] // keep what it grew to
	return &kgo.Record{Topic: topic, Value: bytes.Clone(b), Headers: []kgo.RecordHeader{{Key: IntentHeader}}}, nil
}

// DecodeIntents reads an intent record: a JSON array of attempt records
// (IntentBatch), or a single one, as dispatchers before batches wrote.
// An intent that cannot be stored fails the whole record.
func DecodeIntents(kr *kgo.Record) ([]Intent, error) {
	v := bytes.TrimLeft(kr.Value, " \t\r\n")
	if len(v) == 0 || v[0] != '[' {
		r, err := Decode(kr)
		if err != nil {
			return nil, err
		}
		return []Intent{{Record: r, Value: kr.Value}}, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(v, &raws); err != nil {
		return nil, fmt.Errorf("decoding intent record: %w", err)
	}
	out := make([]Intent, len(raws))
	for i, raw := range raws {
		r, err := Decode(&kgo.Record{Value: raw})
		if err != nil {
			return nil, fmt.Errorf("intent %d: %w", i, err)
		}
		out[i] = Intent{Record: r, Value: raw}
	}
	return out, nil
}
