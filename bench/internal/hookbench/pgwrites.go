package hookbench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PGWrites is what Postgres wrote for a phase, per delivered webhook.
type PGWrites struct {
	Deliveries int `json:"deliveries"`
	// DatabaseRowsPerDelivery is pg_stat_database's tup_inserted +
	// tup_updated + tup_deleted of the phase's database per delivery:
	// every row, system catalogs and temporary tables included.
	DatabaseRowsPerDelivery float64 `json:"database_rows_per_delivery"`
	// RowsPerDelivery is the rows inserted, updated and deleted in the
	// database's permanent tables (pg_stat_user_tables, temporary tables
	// left out: they are not WAL-logged) per delivery, the generator's
	// outbox rows included.
	RowsPerDelivery float64 `json:"rows_per_delivery"`
	// OwnRowsPerDelivery leaves out the outbox rows the generator inserts
	// (the application's own event writes): what hookd itself writes.
	OwnRowsPerDelivery float64 `json:"own_rows_per_delivery"`
	// TempRowsPerDelivery is the rows written to temporary tables.
	TempRowsPerDelivery float64 `json:"temp_rows_per_delivery"`
	// ByTable is n_tup_ins/upd/del per delivery of each table written.
	ByTable map[string]TableWrites `json:"rows_per_delivery_by_table"`
	// WALBytesPerDelivery is the server's WAL (pg_current_wal_lsn) per
	// delivery: cluster-wide, so it includes the generator's outbox writes.
	WALBytesPerDelivery float64 `json:"wal_bytes_per_delivery"`
	// WALRecordsPerDelivery, FPIPerDelivery and SyncsPerDelivery come from
	// pg_stat_wal (wal_records, wal_fpi, wal_sync: WAL flushes to disk,
	// zero with fsync=off).
	WALRecordsPerDelivery float64 `json:"wal_records_per_delivery"`
	FPIPerDelivery        float64 `json:"wal_full_page_images_per_delivery"`
	SyncsPerDelivery      float64 `json:"wal_syncs_per_delivery"`
	// ServerCPUUsPerDelivery is the Postgres server's CPU (every backend,
	// the generator's and the WAL senders' included) in µs per delivery;
	// 0 when the server is not a local process.
	ServerCPUUsPerDelivery float64 `json:"postgres_cpu_us_per_delivery"`
	// WALSenderCPUUsPerDelivery is the part of it spent in WAL senders
	// (the relay's logical decoding reads all of the server's WAL).
	WALSenderCPUUsPerDelivery float64 `json:"postgres_walsender_cpu_us_per_delivery"`
	// Unsettled is set when the row counters still moved 15 s after the
	// phase (a writer still catching up): the figures are lower bounds.
	Unsettled bool `json:"unsettled,omitempty"`
}

// TableWrites is one table's rows written per delivery.
type TableWrites struct {
	Inserted float64 `json:"inserted"`
	Updated  float64 `json:"updated"`
	Deleted  float64 `json:"deleted"`
}

// pgSnapshot is the cumulative counters at one moment.
type pgSnapshot struct {
	rows                  int64
	tables                map[string][3]int64
	lsn                   int64
	walRecords, fpi, sync int64
	unsettled             bool
}

// pgStats reads the counters of the database at dbURL (and the server's
// WAL counters) once they have settled: backends publish their table
// counters about once a second, so it reads until two reads a second apart
// agree (at most 15 s).
func pgStats(ctx context.Context, dbURL string) (pgSnapshot, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return pgSnapshot{}, err
	}
	defer conn.Close(ctx)
	prev, err := readPGSnapshot(ctx, conn)
	deadline := time.Now().Add(15 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		if err = pause(ctx, time.Second); err != nil {
			break
		}
		var cur pgSnapshot
		if cur, err = readPGSnapshot(ctx, conn); err != nil {
			break
		}
		if cur.rows == prev.rows {
			return cur, nil
		}
		prev = cur
	}
	prev.unsettled = true
	return prev, err
}

func readPGSnapshot(ctx context.Context, conn *pgx.Conn) (pgSnapshot, error) {
	var s pgSnapshot
	err := conn.QueryRow(ctx, `SELECT tup_inserted + tup_updated + tup_deleted,
		pg_current_wal_lsn() - '0/0'::pg_lsn FROM pg_stat_database WHERE datname = current_database()`).Scan(&s.rows, &s.lsn)
	if err != nil {
		return s, fmt.Errorf("reading pg_stat_database: %w", err)
	}
	// pg_stat_wal is Postgres 14 and later; without it only the LSN counts.
	_ = conn.QueryRow(ctx, "SELECT wal_records, wal_fpi, wal_sync FROM pg_stat_wal").Scan(&s.walRecords, &s.fpi, &s.sync)
	rows, err := conn.Query(ctx, `SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return s, fmt.Errorf("reading pg_stat_user_tables: %w", err)
	}
	defer rows.Close()
	s.tables = map[string][3]int64{}
	for rows.Next() {
		var name string
		var v [3]int64
		if err := rows.Scan(&name, &v[0], &v[1], &v[2]); err != nil {
			return s, err
		}
		s.tables[name] = v
	}
	return s, rows.Err()
}

// writesBetween turns two snapshots into per-delivery figures. outboxTable
// names the table whose inserts are the generator's ("" for none).
func writesBetween(before, after pgSnapshot, deliveries int, outboxTable string) *PGWrites {
	d := float64(max(deliveries, 1))
	w := &PGWrites{Deliveries: deliveries, ByTable: map[string]TableWrites{},
		DatabaseRowsPerDelivery: float64(after.rows-before.rows) / d,
		WALBytesPerDelivery:     float64(after.lsn-before.lsn) / d,
		WALRecordsPerDelivery:   float64(after.walRecords-before.walRecords) / d,
		FPIPerDelivery:          float64(after.fpi-before.fpi) / d,
		SyncsPerDelivery:        float64(after.sync-before.sync) / d,
		Unsettled:               before.unsettled || after.unsettled}
	for name, a := range after.tables {
		b := before.tables[name]
		t := TableWrites{Inserted: float64(a[0]-b[0]) / d, Updated: float64(a[1]-b[1]) / d, Deleted: float64(a[2]-b[2]) / d}
		if t == (TableWrites{}) {
			continue
		}
		w.ByTable[name] = t
		sum := t.Inserted + t.Updated + t.Deleted
		if strings.HasPrefix(name, "pg_temp") {
			w.TempRowsPerDelivery += sum
			continue
		}
		w.RowsPerDelivery += sum
		w.OwnRowsPerDelivery += sum
		if name == outboxTable {
			w.OwnRowsPerDelivery -= t.Inserted
		}
	}
	return w
}
