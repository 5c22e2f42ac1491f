package relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/producer/event"
	"github.com/hookd/hookd/store"
)

// outboxRelation is webhooks.outbox as pgoutput describes it.
var outboxRelation = &pglogrepl.RelationMessage{RelationID: 16400, Namespace: "webhooks", RelationName: "outbox",
	Columns: []*pglogrepl.RelationMessageColumn{{Name: "id"}, {Name: "account"}, {Name: "type"}, {Name: "payload"}, {Name: "created_at"}}}

// column is one column of a test tuple: its kind ('t', 'b', 'n', 'u') and
// bytes.
type column struct {
	kind byte
	data string
}

// insertMessage encodes a pgoutput insert message of cols.
func insertMessage(relID uint32, cols ...column) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, relID)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, uint16(len(cols)))
	for _, c := range cols {
		b = append(b, c.kind)
		if c.kind == 't' || c.kind == 'b' {
			b = binary.BigEndian.AppendUint32(b, uint32(len(c.data)))
			b = append(b, c.data...)
		}
	}
	return b
}

// decodeReference is the relay's decoding before it was done by hand:
// pglogrepl's, then a column at a time through pgtype.
func decodeReference(rel *pglogrepl.RelationMessage, data []byte, types *pgtype.Map) (store.OutboxRow, error) {
	var row store.OutboxRow
	lm, err := pglogrepl.Parse(data)
	if err != nil {
		return row, err
	}
	ins := lm.(*pglogrepl.InsertMessage)
	if ins.Tuple == nil || len(ins.Tuple.Columns) != len(rel.Columns) {
		return row, errors.New("insert tuple does not match the outbox relation")
	}
	seen := 0
	for i, col := range ins.Tuple.Columns {
		name := rel.Columns[i].Name
		if col.DataType != pglogrepl.TupleDataTypeText {
			switch name {
			case "id", "account", "type":
				return row, fmt.Errorf("outbox column %s is not text in the WAL (kind %q)", name, col.DataType)
			}
			continue
		}
		switch name {
		case "id":
			row.ID, seen = string(col.Data), seen+1
		case "account":
			row.Account, seen = string(col.Data), seen+1
		case "type":
			row.Type, seen = string(col.Data), seen+1
		case "payload":
			row.Payload = append([]byte(nil), col.Data...)
		case "created_at":
			var ts pgtype.Timestamptz
			if err := types.Scan(pgtype.TimestamptzOID, pgtype.TextFormatCode, col.Data, &ts); err != nil {
				return row, fmt.Errorf("outbox created_at %q: %w", col.Data, err)
			}
			row.CreatedAt = ts.Time
		}
	}
	if seen != 3 {
		return row, errors.New("outbox insert lacks id, account or type")
	}
	return row, nil
}

// decode is the relay's decoding of an insert message.
func decode(t testing.TB, data []byte) (store.OutboxRow, error) {
	t.Helper()
	relID, tuple, err := insertRelation(data)
	if err != nil {
		return store.OutboxRow{}, err
	}
	if relID != outboxRelation.RelationID {
		t.Fatalf("relation %d, want %d", relID, outboxRelation.RelationID)
	}
	return decodeInsert(outboxRelation, tuple, pgtype.NewMap())
}

// FuzzDecodeInsert: the hand-written decoding and the pglogrepl and
// pgtype one agree on every well-formed insert: the same row, or the same
// error.
func FuzzDecodeInsert(f *testing.F) {
	for _, created := range []string{"2026-12-01 11:15:57.123456+00", "2026-12-01 11:15:57+00", "2026-12-01 12:15:57.1+01",
		"2026-12-01 06:45:57.12345-04:30", "1900-01-01 00:00:00+00:09:21", "2024-02-29 23:59:59.999999+14", "2023-02-29 00:00:00+00",
		"0001-01-01 00:00:00+00 BC", "infinity", "-infinity", "12345-01-01 00:00:00+00", "2026-12-01T11:15:57Z", "Tue Dec 01 11:15:57 2026 UTC",
		"2026-12-01 24:00:00+00", "2026-12-01 11:15:57.1234567+00", "2026-12-01 11:15:57.+00", "2026-12-01 11:15:57+0", "2026-13-01 00:00:00+00",
		"2026-12-01 11:15:57+00:60", "2026-12-01 11:15:57+99", "2026-12-01 11:15:57+00:00:00", "2026-12-01 11:15:57 +00", "+026-12-01 11:15:57+00", "0000-01-01 00:00:00+00"} {
		f.Add("0193a0c2-7d4e", "acct_1", "invoice.paid", `{"n": 1}`, created, byte('t'), byte('t'), byte('t'))
	}
	f.Add("e", "a", "t", "", "", byte('n'), byte('n'), byte('t'))
	f.Add("e", "a", "t", `{}`, "", byte('u'), byte('b'), byte('t'))
	f.Add("e", "", "t", `{}`, "", byte('t'), byte('t'), byte('n'))
	f.Fuzz(func(t *testing.T, id, account, typ, payload, created string, payloadKind, createdKind, idKind byte) {
		data := insertMessage(outboxRelation.RelationID, column{idKind, id}, column{'t', account}, column{'t', typ},
			column{payloadKind, payload}, column{createdKind, created})
		for _, k := range []byte{payloadKind, createdKind, idKind} {
			if k != 't' && k != 'b' && k != 'n' && k != 'u' {
				return // pglogrepl misreads other kinds
			}
		}
		want, wantErr := decodeReference(outboxRelation, data, pgtype.NewMap())
		got, gotErr := decode(t, data)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%q: error %v, pglogrepl and pgtype say %v", data, gotErr, wantErr)
		}
		if gotErr != nil {
			return
		}
		if got.ID != want.ID || got.Account != want.Account || got.Type != want.Type || !bytes.Equal(got.Payload, want.Payload) ||
			!got.CreatedAt.Equal(want.CreatedAt) || got.CreatedAt.IsZero() != want.CreatedAt.IsZero() {
			t.Fatalf("%q: decoded %+v, pglogrepl and pgtype say %+v", data, got, want)
		}
	})
}

// A truncated or malformed insert is an error, never a panic.
func TestDecodeInsertTruncated(t *testing.T) {
	t.Parallel()
	data := insertMessage(outboxRelation.RelationID, column{'t', "e"}, column{'t', "a"}, column{'t', "t"}, column{'t', "{}"},
		column{'t', "2026-12-01 11:15:57+00"})
	if _, err := decode(t, data); err != nil {
		t.Fatal(err)
	}
	for n := range len(data) {
		if _, err := decode(t, data[:n]); err == nil {
			t.Fatalf("%q: decoded a truncated insert", data[:n])
		}
	}
	old := bytes.Clone(data)
	old[5] = 'O' // an old tuple (an update's), not a new one
	if _, err := decode(t, old); err == nil {
		t.Fatal("decoded an insert without a new tuple")
	}
}

// TestTimestamptzFastPath: Postgres's ISO output is parsed by hand (the
// fuzz test holds it to pgtype's result), other forms through pgtype.
func TestTimestamptzFastPath(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]time.Time{
		"2026-12-01 11:15:57.123456+00":    time.Date(2026, 12, 1, 11, 15, 57, 123456000, time.UTC),
		"2026-12-01 06:45:57.5-04:30":      time.Date(2026, 12, 1, 11, 15, 57, 500000000, time.UTC),
		"1900-01-01 00:00:00+00:09:21":     time.Date(1899, 12, 31, 23, 50, 39, 0, time.UTC),
		"2024-02-29 23:59:59.000001+14":    time.Date(2024, 2, 29, 9, 59, 59, 1000, time.UTC),
		"0001-01-01 00:00:00+00":           time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		"9999-12-31 23:59:59.999999-15:59": time.Date(10000, 1, 1, 15, 58, 59, 999999000, time.UTC),
	} {
		got, ok := parseISOTimestamptz([]byte(s))
		if !ok || !got.Equal(want) {
			t.Errorf("%s: parsed %v %v, want %v", s, got, ok, want)
		}
	}
	for _, s := range []string{"infinity", "2023-02-29 00:00:00+00", "0001-01-01 00:00:00+00 BC", "2026-12-01 11:15:57.1234567+00",
		"2026-12-01T11:15:57Z", "2026-12-01 11:15:57+00:00:0"} {
		if got, ok := parseISOTimestamptz([]byte(s)); ok {
			t.Errorf("%s: parsed by hand as %v", s, got)
		}
	}
}

// TestAppendLSN: LSNs are written as pglogrepl writes them.
func TestAppendLSN(t *testing.T) {
	t.Parallel()
	for _, lsn := range []pglogrepl.LSN{0, 1, 0xF, 0x10, 0x16_B374D848, 0xFFFFFFFF_FFFFFFFF, 0xABCDEF01_00000000, 0x1_0000000A} {
		if got, want := string(appendLSN([]byte("x"), lsn)), "x"+lsn.String(); got != want {
			t.Errorf("%#x: %s, want %s", uint64(lsn), got, want)
		}
	}
}

// TestRecord: a row's record has the envelope, key and headers the relay
// always gave it, and neither it nor the row's strings (kept for a dead
// letter) hold the replication message's buffer, which the next message
// overwrites.
func TestRecord(t *testing.T) {
	t.Parallel()
	r := &Relay{cfg: Config{EventsTopic: "webhooks.events"}}
	data := insertMessage(outboxRelation.RelationID, column{'t', "evt_1"}, column{'t', "acct_1"}, column{'t', "invoice.paid"},
		column{'t', `{"n": 1, "note": "<b>"}`}, column{'t', "2026-12-01 11:15:57.123456+00"})
	row, err := decode(t, data)
	if err != nil {
		t.Fatal(err)
	}
	o := origin{lsn: 0x16_B374D848}
	rec, err := r.record(row, o)
	if err != nil {
		t.Fatal(err)
	}
	value, err := event.Marshal(event.Envelope{ID: "evt_1", Account: "acct_1", Type: "invoice.paid",
		Data: []byte(`{"n": 1, "note": "<b>"}`), Created: time.Date(2026, 12, 1, 11, 15, 57, 123456000, time.UTC)})
	if err != nil {
		t.Fatal(err)
	}
	want := &kgo.Record{Topic: "webhooks.events", Key: []byte("acct_1"), Value: value, Headers: []kgo.RecordHeader{
		{Key: HeaderSource, Value: []byte("outbox")}, {Key: HeaderLSN, Value: []byte("16/B374D848")}, {Key: HeaderOutboxID, Value: []byte("evt_1")}}}
	for i := range data {
		data[i] = 'X' // the next message
	}
	if !reflect.DeepEqual(rec, want) {
		t.Fatalf("record\n%+v, want\n%+v", rec, want)
	}
	if row.ID != "evt_1" || row.Account != "acct_1" || row.Type != "invoice.paid" {
		t.Fatalf("the row's strings changed with the buffer: %+v", row)
	}
}

// BenchmarkRow measures the relay's work for one streamed outbox row, from
// the pgoutput insert message to the record handed to Kafka.
func BenchmarkRow(b *testing.B) {
	r := &Relay{cfg: Config{EventsTopic: "webhooks.events"}}
	types := pgtype.NewMap()
	data := insertMessage(outboxRelation.RelationID, column{'t', "0193a0c2-7d4e-7a51-9c3e-5f7b1e2d3c4a"}, column{'t', "acct_42"},
		column{'t', "invoice.paid"}, column{'t', `{"n": 123456, "amount": 1200}`}, column{'t', "2026-12-01 11:15:57.123456+00"})
	o := origin{lsn: 0x16_B374D848}
	b.ReportAllocs()
	for b.Loop() {
		_, tuple, err := insertRelation(data)
		if err != nil {
			b.Fatal(err)
		}
		row, err := decodeInsert(outboxRelation, tuple, types)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.record(row, o); err != nil {
			b.Fatal(err)
		}
	}
}
