package dispatcher

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FuzzSourceHeader: parseSource reads back exactly what sourceHeader
// wrote, and refuses anything that is not "<topic>/<partition>/<offset>"
// with a non-empty topic and non-negative numbers, never panicking.
func FuzzSourceHeader(f *testing.F) {
	f.Add("webhooks.deliveries", int32(3), int64(541), "webhooks.retry.1s/2/63")
	f.Add("t", int32(0), int64(0), "/0/0")
	f.Add("a-b_c", int32(2147483647), int64(9223372036854775807), "x/-1/2")
	f.Add("x", int32(1), int64(1), "x/1/99999999999999999999")
	f.Fuzz(func(t *testing.T, topic string, part int32, off int64, raw string) {
		if pos, ok := parseSource(raw); ok {
			if pos.Topic == "" || pos.Partition < 0 || pos.Offset < 0 {
				t.Fatalf("parseSource(%q) = %+v, accepted", raw, pos)
			}
			if again, _ := parseSource(string(sourceHeader(&kgo.Record{Topic: pos.Topic, Partition: pos.Partition, Offset: pos.Offset}).Value)); again != pos {
				t.Fatalf("parseSource(%q) = %+v, written again and read %+v", raw, pos, again)
			}
		}
		if ValidateInstanceID(topic) != nil || topic == "" || part < 0 || off < 0 {
			return // not a Kafka topic name, or not a record's position
		}
		h := sourceHeader(&kgo.Record{Topic: topic, Partition: part, Offset: off})
		pos, ok := parseSource(string(h.Value))
		if !ok || pos.Topic != topic || pos.Partition != part || pos.Offset != off {
			t.Fatalf("sourceHeader(%s, %d, %d) = %q, read back as %+v, %v", topic, part, off, h.Value, pos, ok)
		}
	})
}
