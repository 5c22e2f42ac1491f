package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrRelaySetup is wrapped by the relay pre-flight errors that no retry
// can fix (wal_level, missing REPLICATION attribute, a foreign slot or
// publication under hookd's name): the operator must act.
var ErrRelaySetup = errors.New("relay setup")

// OutboxRow is one row of webhooks.outbox.
type OutboxRow struct {
	ID        string
	Account   string
	Type      string
	Payload   []byte // JSON
	CreatedAt time.Time
	// Traceparent is the optional W3C traceparent the application wrote
	// (NULL reads as "").
	Traceparent string
}

// CheckLogicalReplication verifies that the server and the connected role
// can run the relay: wal_level = logical and the REPLICATION attribute (or
// superuser). Each failure is one line saying what to change.
func (s *Store) CheckLogicalReplication(ctx context.Context) error {
	var level, role string
	var canReplicate bool
	err := s.pool.QueryRow(ctx, `SELECT current_setting('wal_level'), current_user,
		COALESCE((SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), false)`).
		Scan(&level, &role, &canReplicate)
	if err != nil {
		return fmt.Errorf("checking replication settings: %s", oneLine(err))
	}
	if level != "logical" {
		return fmt.Errorf("%w: Postgres wal_level is %q but the relay needs logical (set wal_level = logical in postgresql.conf or with ALTER SYSTEM, then restart Postgres)",
			ErrRelaySetup, level)
	}
	if !canReplicate {
		return fmt.Errorf("%w: role %q lacks the REPLICATION attribute the relay needs (run ALTER ROLE %s WITH REPLICATION as a superuser)",
			ErrRelaySetup, role, pgx.Identifier{role}.Sanitize())
	}
	return nil
}

// EnsureOutboxPublication creates the publication name for INSERTs on
// webhooks.outbox only, if it does not exist, and checks an existing one.
func (s *Store) EnsureOutboxPublication(ctx context.Context, name string) error {
	var ins, upd, del, trunc, outbox bool
	err := s.pool.QueryRow(ctx, `SELECT p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate,
		EXISTS (SELECT 1 FROM pg_publication_tables t WHERE t.pubname = p.pubname AND t.schemaname = 'webhooks' AND t.tablename = 'outbox')
		FROM pg_publication p WHERE p.pubname = $1`, name).Scan(&ins, &upd, &del, &trunc, &outbox)
	if errors.Is(err, pgx.ErrNoRows) {
		_, err = s.pool.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE webhooks.outbox WITH (publish = 'insert')`,
			pgx.Identifier{name}.Sanitize()))
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42710" { // created meanwhile
			return nil
		}
		if err != nil {
			return fmt.Errorf("creating publication %s: %s", name, oneLine(err))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading publication %s: %s", name, oneLine(err))
	}
	if !ins || !outbox {
		return fmt.Errorf("%w: publication %q exists but does not publish inserts on webhooks.outbox (drop it or choose another publication name)", ErrRelaySetup, name)
	}
	if upd || del || trunc {
		if _, err := s.pool.Exec(ctx, fmt.Sprintf(`ALTER PUBLICATION %s SET (publish = 'insert')`, pgx.Identifier{name}.Sanitize())); err != nil {
			return fmt.Errorf("limiting publication %s to inserts: %s", name, oneLine(err))
		}
	}
	return nil
}

// SlotState describes a replication slot.
type SlotState struct {
	Exists bool
	// Backfilled says the relay finished back-filling when it created the
	// slot (a row in webhooks.relay_slots).
	Backfilled bool
	Database   string
	Plugin     string
	Active     bool
}

// ReplicationSlot describes the slot name.
func (s *Store) ReplicationSlot(ctx context.Context, name string) (SlotState, error) {
	var st SlotState
	var db, plugin *string
	err := s.pool.QueryRow(ctx, `SELECT database, plugin, active FROM pg_replication_slots WHERE slot_name = $1`, name).
		Scan(&db, &plugin, &st.Active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return st, fmt.Errorf("reading replication slot %s: %s", name, oneLine(err))
	default:
		st.Exists = true
		if db != nil {
			st.Database = *db
		}
		if plugin != nil {
			st.Plugin = *plugin
		}
	}
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhooks.relay_slots WHERE slot_name = $1)`, name).Scan(&st.Backfilled); err != nil {
		return st, fmt.Errorf("reading relay slot state %s: %s", name, oneLine(err))
	}
	return st, nil
}

// DropReplicationSlot drops an inactive slot and forgets its back-fill.
func (s *Store) DropReplicationSlot(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, name); err != nil {
		return fmt.Errorf("dropping replication slot %s: %s", name, oneLine(err))
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM webhooks.relay_slots WHERE slot_name = $1`, name); err != nil {
		return fmt.Errorf("forgetting relay slot %s: %s", name, oneLine(err))
	}
	return nil
}

// ForgetBackfill removes the back-fill record of slot name (the slot is
// gone and will be re-created).
func (s *Store) ForgetBackfill(ctx context.Context, name string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM webhooks.relay_slots WHERE slot_name = $1`, name); err != nil {
		return fmt.Errorf("forgetting relay slot %s: %s", name, oneLine(err))
	}
	return nil
}

// MarkBackfilled records that the back-fill of slot name is complete.
func (s *Store) MarkBackfilled(ctx context.Context, name string, rows int64) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.relay_slots (slot_name, backfilled_rows) VALUES ($1, $2)
		ON CONFLICT (slot_name) DO UPDATE SET backfilled_rows = EXCLUDED.backfilled_rows, backfilled_at = now()`, name, rows)
	if err != nil {
		return fmt.Errorf("recording relay slot %s: %s", name, oneLine(err))
	}
	return nil
}

// OutboxSnapshot calls fn for every outbox row visible in the exported
// snapshot (from CREATE_REPLICATION_SLOT ... EXPORT_SNAPSHOT), oldest
// first: the rows committed before the slot existed.
func (s *Store) OutboxSnapshot(ctx context.Context, snapshot string, fn func(OutboxRow) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET TRANSACTION SNAPSHOT '%s'", snapshot)); err != nil {
			return fmt.Errorf("importing snapshot %s: %s", snapshot, oneLine(err))
		}
		rows, err := tx.Query(ctx, `SELECT id, account, type, payload::text, created_at, COALESCE(traceparent, '') FROM webhooks.outbox ORDER BY created_at, id`)
		if err != nil {
			return fmt.Errorf("reading the outbox: %s", oneLine(err))
		}
		defer rows.Close()
		for rows.Next() {
			var r OutboxRow
			var payload string
			if err := rows.Scan(&r.ID, &r.Account, &r.Type, &payload, &r.CreatedAt, &r.Traceparent); err != nil {
				return fmt.Errorf("reading the outbox: %s", oneLine(err))
			}
			r.Payload = []byte(payload)
			if err := fn(r); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("reading the outbox: %s", oneLine(err))
		}
		return nil
	})
}

// PruneOutbox deletes outbox rows created more than olderThan ago, at most
// batch rows per statement, until none is left; it returns how many it
// deleted. Only committed rows are visible, and every committed row is
// already in the WAL the relay's slot retains, so pruning never loses an
// event.
func (s *Store) PruneOutbox(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	for {
		tag, err := s.pool.Exec(ctx, `DELETE FROM webhooks.outbox WHERE ctid = ANY(ARRAY(
			SELECT ctid FROM webhooks.outbox WHERE created_at < now() - make_interval(secs => $1::float8) LIMIT $2))`, olderThan.Seconds(), batch)
		if err != nil {
			return total, fmt.Errorf("pruning the outbox: %s", oneLine(err))
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// SlotLag is a slot's WAL position against the server's.
type SlotLag struct {
	// RetainedBytes is the WAL the slot keeps on the server's disk.
	RetainedBytes int64
	// LagBytes is the WAL written since the slot's confirmed position.
	LagBytes int64
	// ConfirmedLSN is the slot's confirmed_flush_lsn as a number.
	ConfirmedLSN uint64
}

// ReplicationSlotLag measures slot name; ErrNotFound if it does not exist.
func (s *Store) ReplicationSlotLag(ctx context.Context, name string) (SlotLag, error) {
	var l SlotLag
	var confirmed *int64
	err := s.pool.QueryRow(ctx, `SELECT
		COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint,
		COALESCE(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint,
		pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&l.RetainedBytes, &l.LagBytes, &confirmed)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return l, fmt.Errorf("replication slot %s: %w", name, ErrNotFound)
		}
		return l, fmt.Errorf("measuring replication slot %s: %s", name, oneLine(err))
	}
	if confirmed != nil {
		l.ConfirmedLSN = uint64(*confirmed)
	}
	return l, nil
}

// LeaderLock is a session-level advisory lock held on a connection of its
// own; closing the connection (or the process dying) releases it.
type LeaderLock struct {
	conn *pgx.Conn
}

// TryLeaderLock tries once to take the advisory lock key on a dedicated
// connection; it returns (nil, nil) when another session holds it.
func (s *Store) TryLeaderLock(ctx context.Context, key int64) (*LeaderLock, error) {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting for the leader lock: %s", oneLine(err))
	}
	conn := pc.Hijack()
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("taking the leader lock: %s", oneLine(err))
	}
	if !ok {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, nil
	}
	return &LeaderLock{conn: conn}, nil
}

// Check verifies the lock's connection is alive (and so the lock held).
func (l *LeaderLock) Check(ctx context.Context) error {
	if err := l.conn.Ping(ctx); err != nil {
		return fmt.Errorf("leader lock connection lost: %s", oneLine(err))
	}
	return nil
}

// Release gives the lock up by closing its connection.
func (l *LeaderLock) Release(ctx context.Context) {
	_ = l.conn.Close(ctx)
}
