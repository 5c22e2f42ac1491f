package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrReplayBusy is returned by LockReplay when another process runs the
// same replay request.
var ErrReplayBusy = errors.New("replay is running in another process")

// Replay statuses, as stored in webhooks.replays.status.
const (
	ReplayRunning     = "running"
	ReplayDone        = "done"
	ReplayInterrupted = "interrupted"
	ReplayFailed      = "failed"
)

// Replay is one row of webhooks.replays: the audit record and the progress
// of one replay request.
type Replay struct {
	ID     string `json:"id"`
	Kind   string `json:"kind"`
	Actor  string `json:"actor"`
	Reason string `json:"reason"`
	// Account is the account whose API token asked for it; empty for
	// operators.
	Account string `json:"account,omitempty"`
	// Filter is the request as resolved (absolute times, limit, force).
	Filter   json.RawMessage `json:"filter"`
	DryRun   bool            `json:"dry_run"`
	Matched  int64           `json:"matched"`
	Replayed int64           `json:"replayed"`
	Skipped  int64           `json:"skipped"`
	Status   string          `json:"status"`
	Error    string          `json:"error,omitempty"`
	// Progress is owned by package replay (offsets, bounds).
	Progress   json.RawMessage `json:"progress"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

const replayColumns = `id, kind, actor, reason, account, filter, dry_run, matched, replayed, skipped, status, error,
	progress, created_at, updated_at, finished_at`

func scanReplay(row pgx.Row) (Replay, error) {
	var (
		r            Replay
		account, msg *string
	)
	err := row.Scan(&r.ID, &r.Kind, &r.Actor, &r.Reason, &account, &r.Filter, &r.DryRun, &r.Matched, &r.Replayed,
		&r.Skipped, &r.Status, &msg, &r.Progress, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt)
	if err != nil {
		return r, translate(err)
	}
	r.Account, r.Error = deref(account), deref(msg)
	return r, nil
}

// ErrReplayIDTaken is returned by CreateReplay when an operator's replay
// (account "") asks for an id an account's replay has, or the other way
// round: a replay's id marks the records it produces, and an operator's
// replay, which can cover every account's dead letters, must never take
// an account's records for its own.
var ErrReplayIDTaken = errors.New("replay id is taken")

// ErrReplayAmbiguous is returned by GetReplay when several accounts have a
// replay with the id: name the account (GetAccountReplay).
var ErrReplayAmbiguous = errors.New("replay id is used by several accounts")

// CreateReplay inserts r unless a replay with its id exists in its scope
// (r.Account's replays, or the operators' when it is empty), and returns
// the stored row and whether this call created it. Ids are per account:
// two accounts may have a replay each with the same id, and neither can
// tell.
func (s *Store) CreateReplay(ctx context.Context, r Replay) (Replay, bool, error) {
	if len(r.Filter) == 0 {
		r.Filter = json.RawMessage("{}")
	}
	if len(r.Progress) == 0 {
		r.Progress = json.RawMessage("{}")
	}
	if r.Status == "" {
		r.Status = ReplayRunning
	}
	var finished *time.Time
	if r.Status != ReplayRunning {
		now := time.Now()
		finished = &now
	}
	var (
		out     Replay
		created bool
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// One id at a time, so the scope check below and the insert are
		// one step for every process.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('hookd-replay-id:' || $1, 0))`, r.ID); err != nil {
			return err
		}
		var other bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM webhooks.replays
			WHERE id = $1 AND (account IS NULL) <> ($2 = ''))`, r.ID, r.Account).Scan(&other); err != nil {
			return err
		}
		if other {
			return ErrReplayIDTaken
		}
		var err error
		out, err = scanReplay(tx.QueryRow(ctx, `INSERT INTO webhooks.replays
			(id, kind, actor, reason, account, filter, dry_run, matched, replayed, skipped, status, progress, finished_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
			ON CONFLICT ((coalesce(account, '')), id) DO NOTHING RETURNING `+replayColumns,
			r.ID, r.Kind, r.Actor, r.Reason, nullString(r.Account), r.Filter, r.DryRun, r.Matched, r.Replayed, r.Skipped,
			r.Status, r.Progress, finished))
		created = err == nil
		if errors.Is(err, ErrNotFound) {
			out, err = scanReplay(tx.QueryRow(ctx, `SELECT `+replayColumns+` FROM webhooks.replays
				WHERE coalesce(account, '') = $1 AND id = $2`, r.Account, r.ID))
		}
		return err
	})
	switch {
	case errors.Is(err, ErrReplayIDTaken):
		return r, false, fmt.Errorf("replay %s: %w by a replay of another scope (operator or account)", r.ID, ErrReplayIDTaken)
	case err != nil:
		return r, false, fmt.Errorf("creating replay %s: %s", r.ID, oneLine(err))
	}
	return out, created, nil
}

// GetAccountReplay returns the replay with id of account (the operators'
// when account is ""), or ErrNotFound.
func (s *Store) GetAccountReplay(ctx context.Context, account, id string) (Replay, error) {
	r, err := scanReplay(s.pool.QueryRow(ctx, `SELECT `+replayColumns+` FROM webhooks.replays
		WHERE coalesce(account, '') = $1 AND id = $2`, account, id))
	if errors.Is(err, ErrNotFound) {
		return r, fmt.Errorf("replay %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("reading replay %s: %s", id, oneLine(err))
	}
	return r, nil
}

// GetReplay returns the replay with id, whoever's it is (an operator's
// view): ErrNotFound when there is none, ErrReplayAmbiguous when several
// accounts have one.
func (s *Store) GetReplay(ctx context.Context, id string) (Replay, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+replayColumns+` FROM webhooks.replays WHERE id = $1 LIMIT 2`, id)
	if err != nil {
		return Replay{}, fmt.Errorf("reading replay %s: %s", id, oneLine(err))
	}
	defer rows.Close()
	var found []Replay
	for rows.Next() {
		r, err := scanReplay(rows)
		if err != nil {
			return Replay{}, fmt.Errorf("reading replay %s: %s", id, oneLine(err))
		}
		found = append(found, r)
	}
	if err := rows.Err(); err != nil {
		return Replay{}, fmt.Errorf("reading replay %s: %s", id, oneLine(err))
	}
	switch len(found) {
	case 0:
		return Replay{}, fmt.Errorf("replay %s: %w", id, ErrNotFound)
	case 1:
		return found[0], nil
	}
	return Replay{}, fmt.Errorf("replay %s: %w: name the account", id, ErrReplayAmbiguous)
}

// ListReplaysParams filters ListReplays.
type ListReplaysParams struct {
	// Account restricts to the replays requested with that account's token.
	Account string
	// Limit caps the rows. Defaults to 100.
	Limit int
}

// ListReplays returns replays, newest first.
func (s *Store) ListReplays(ctx context.Context, p ListReplaysParams) ([]Replay, error) {
	if p.Limit <= 0 {
		p.Limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+replayColumns+` FROM webhooks.replays
		WHERE ($1 = '' OR account = $1) ORDER BY created_at DESC, id LIMIT $2`, p.Account, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("listing replays: %s", oneLine(err))
	}
	defer rows.Close()
	out := []Replay{}
	for rows.Next() {
		r, err := scanReplay(rows)
		if err != nil {
			return nil, fmt.Errorf("listing replays: %s", oneLine(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing replays: %s", oneLine(err))
	}
	return out, nil
}

// ReplayLock is held by the one process running a replay request.
type ReplayLock struct {
	conn *pgxpool.Conn
	key  string
}

// LockReplay takes the session advisory lock of account's replay id (an
// operator's when account is "") on a connection of its own, or returns
// ErrReplayBusy. The lock dies with the connection, so a killed process
// never leaves it behind.
func (s *Store) LockReplay(ctx context.Context, account, id string) (*ReplayLock, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("locking replay %s: %s", id, oneLine(err))
	}
	key := replayLockKey(account, id)
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("locking replay %s: %s", id, oneLine(err))
	}
	if !ok {
		conn.Release()
		return nil, fmt.Errorf("replay %s: %w", id, ErrReplayBusy)
	}
	return &ReplayLock{conn: conn, key: key}, nil
}

// replayLockKey names the advisory lock of a replay: an operator's keeps
// the key it had before ids were per account, an account's adds the
// account after a character no id holds.
func replayLockKey(account, id string) string {
	if account == "" {
		return "hookd-replay:" + id
	}
	return "hookd-replay:" + id + "@" + account
}

// Unlock releases the lock.
func (l *ReplayLock) Unlock() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := l.conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, l.key); err != nil {
		// The session may still hold it: never hand that connection back.
		_ = l.conn.Hijack().Close(ctx)
		return
	}
	l.conn.Release()
}

// ReplayUpdate is a progress save of a running replay.
type ReplayUpdate struct {
	// Account and ID name the replay (Account "": an operator's).
	Account  string
	ID       string
	Matched  int64
	Replayed int64
	Skipped  int64
	Progress json.RawMessage
	// Status, when set, ends the run: done, interrupted or failed.
	Status string
	Error  string
}

// UpdateReplay saves the counters and progress of a replay (and its final
// status, if given).
func (s *Store) UpdateReplay(ctx context.Context, u ReplayUpdate) error {
	status := u.Status
	if status == "" {
		status = ReplayRunning
	}
	tag, err := s.pool.Exec(ctx, `UPDATE webhooks.replays SET matched = $2, replayed = $3, skipped = $4,
		progress = $5, status = $6, error = $7, updated_at = now(),
		finished_at = CASE WHEN $6 = 'running' THEN NULL ELSE now() END
		WHERE id = $1 AND coalesce(account, '') = $8`, u.ID, u.Matched, u.Replayed, u.Skipped, u.Progress, status,
		nullString(u.Error), u.Account)
	if err != nil {
		return fmt.Errorf("saving replay %s: %s", u.ID, oneLine(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("replay %s: %w", u.ID, ErrNotFound)
	}
	return nil
}
