package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Delivery is one row of webhooks.deliveries: the state of one event for
// one endpoint, as the attempt-log writer last recorded it.
type Delivery struct {
	ID             string     `json:"id"`
	EventID        string     `json:"event_id"`
	EndpointID     string     `json:"endpoint_id"`
	Account        string     `json:"account"`
	EventType      string     `json:"event_type"`
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	LastStatusCode int        `json:"last_status_code,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	NextDueAt      *time.Time `json:"next_due_at,omitempty"`
	DeadReason     string     `json:"dead_reason,omitempty"`
	DLQTopic       string     `json:"dlq_topic,omitempty"`
	DLQPartition   *int32     `json:"dlq_partition,omitempty"`
	DLQOffset      *int64     `json:"dlq_offset,omitempty"`
	EventCreatedAt time.Time  `json:"event_created_at"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	LastAttemptAt  *time.Time `json:"last_attempt_at,omitempty"`
	// RecordTopic, RecordPartition and RecordOffset locate the delivery's
	// record on the deliveries topic, where its payload is read while
	// retention keeps it; empty for rows written before hookd kept them.
	RecordTopic     string `json:"record_topic,omitempty"`
	RecordPartition *int32 `json:"record_partition,omitempty"`
	RecordOffset    *int64 `json:"record_offset,omitempty"`
}

// Attempt is one row of the attempt log.
type Attempt struct {
	AttemptID       string    `json:"attempt_id"`
	DeliveryID      string    `json:"delivery_id"`
	Attempt         int       `json:"attempt"`
	Tier            string    `json:"tier"`
	StartedAt       time.Time `json:"started_at"`
	DurationMS      int       `json:"duration_ms"`
	StatusCode      int       `json:"status_code,omitempty"`
	Outcome         string    `json:"outcome"`
	ErrorClass      string    `json:"error_class,omitempty"`
	Error           string    `json:"error,omitempty"`
	ResponseExcerpt string    `json:"response_excerpt,omitempty"`
	NextAction      string    `json:"next_action"`
	ReplayID        string    `json:"replay_id,omitempty"`
	// Destination is the URL the attempt was sent to and BodySHA256 the
	// hex SHA-256 of the bytes sent; empty when no request was made or for
	// attempts logged before hookd recorded them.
	Destination string `json:"destination,omitempty"`
	BodySHA256  string `json:"body_sha256,omitempty"`
}

const deliveryColumns = `id, event_id, endpoint_id, account, event_type, status, attempts, last_status_code,
	last_error, next_due_at, dead_reason, dlq_topic, dlq_partition, dlq_offset, event_created_at, created_at,
	updated_at, delivered_at, last_attempt_at, record_topic, record_partition, record_offset`

func scanDelivery(row pgx.Row) (Delivery, error) {
	var (
		d                                 Delivery
		code                              *int32
		lastErr, deadReason, dlqTopic     *string
		recTopic                          *string
		nextDue, deliveredAt, lastAttempt *time.Time
	)
	err := row.Scan(&d.ID, &d.EventID, &d.EndpointID, &d.Account, &d.EventType, &d.Status, &d.Attempts, &code,
		&lastErr, &nextDue, &deadReason, &dlqTopic, &d.DLQPartition, &d.DLQOffset, &d.EventCreatedAt, &d.CreatedAt,
		&d.UpdatedAt, &deliveredAt, &lastAttempt, &recTopic, &d.RecordPartition, &d.RecordOffset)
	if err != nil {
		return d, translate(err)
	}
	if code != nil {
		d.LastStatusCode = int(*code)
	}
	d.LastError, d.DeadReason, d.DLQTopic = deref(lastErr), deref(deadReason), deref(dlqTopic)
	d.RecordTopic = deref(recTopic)
	d.NextDueAt, d.DeliveredAt, d.LastAttemptAt = nextDue, deliveredAt, lastAttempt
	return d, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ListDeliveriesParams filters ListDeliveries. EndpointID or Account must
// be set (the log is read per endpoint or per account, never whole).
type ListDeliveriesParams struct {
	EndpointID string
	// Account restricts to that account's deliveries. With EndpointID and
	// no Account, the endpoint's own account is used (the account it was
	// created by, live or deleted): a delivery row of another account never
	// lists under an endpoint, even if its endpoint id matches.
	Account string
	// Status is one of pending, retrying, delivered, dead; empty means all.
	Status string
	// Before pages backwards: only rows created strictly before it.
	Before time.Time
	// Limit caps the rows returned. Defaults to 100.
	Limit int
}

// ListDeliveries returns the deliveries matching p, newest first.
func (s *Store) ListDeliveries(ctx context.Context, p ListDeliveriesParams) ([]Delivery, error) {
	if p.EndpointID == "" && p.Account == "" {
		return nil, errors.New("listing deliveries: an endpoint or an account is required")
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	// An endpoint id never registered (deleted before ids were kept) has no
	// owner to scope to: its rows show to operators as they are. The
	// conditions are put together here rather than with ($n = '' OR ...)
	// in SQL, so that the generic plan of the prepared statement reads the
	// matching index as a custom plan would.
	c := conds{where: "true"}
	if p.EndpointID != "" {
		c.add("endpoint_id = $%d", p.EndpointID)
	}
	if p.Account != "" {
		c.add("account = $%d", p.Account)
	} else {
		c.add("account = COALESCE((SELECT e.account FROM webhooks.endpoint_ids e WHERE e.id = $%[1]d), account)", p.EndpointID)
	}
	if p.Status != "" {
		c.add("status = $%d", p.Status)
		c.where += notDelivered(p.Status)
	}
	if !p.Before.IsZero() {
		c.add("created_at < $%d", p.Before)
	}
	c.args = append(c.args, p.Limit)
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhooks.deliveries WHERE `+c.where+
		fmt.Sprintf(` ORDER BY created_at DESC, id LIMIT $%d`, len(c.args)), c.args...)
	if err != nil {
		return nil, fmt.Errorf("listing deliveries: %s", oneLine(err))
	}
	return collectDeliveries(rows)
}

// conds are the conditions of a listing, rendered into its WHERE clause,
// and their arguments.
type conds struct {
	where string
	args  []any
}

// add appends cond, a format whose one %d is its placeholder's number,
// with its argument v.
func (c *conds) add(cond string, v any) {
	c.args = append(c.args, v)
	c.where += fmt.Sprintf(" AND "+cond, len(c.args))
}

// notDelivered is the condition a listing filtered on status adds when the
// status is not 'delivered': it lets the planner read the status indexes,
// which leave delivered rows out (migration 13).
func notDelivered(status string) string {
	if status == "" || status == "delivered" {
		return ""
	}
	return " AND status <> 'delivered'"
}

func collectDeliveries(rows pgx.Rows) ([]Delivery, error) {
	defer rows.Close()
	out := []Delivery{}
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("reading deliveries: %s", oneLine(err))
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading deliveries: %s", oneLine(err))
	}
	return out, nil
}

// AnyAccount, as the account of a delivery-log read, is an operator's
// read (hookctl, the admin token): every account's rows. Callers acting
// for an account pass that account.
const AnyAccount = ""

// GetDelivery returns the delivery with id of account (AnyAccount: of any
// account), or ErrNotFound.
func (s *Store) GetDelivery(ctx context.Context, account, id string) (Delivery, error) {
	d, err := scanDelivery(s.pool.QueryRow(ctx, `SELECT `+deliveryColumns+` FROM webhooks.deliveries
		WHERE id = $2 AND ($1 = '' OR account = $1)`, account, id))
	if errors.Is(err, ErrNotFound) {
		return d, fmt.Errorf("delivery %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("reading delivery %s: %s", id, oneLine(err))
	}
	return d, nil
}

// DeliveriesOfEvent returns the deliveries of one event of account
// (AnyAccount: of any account), one per endpoint it was fanned out to,
// ordered by endpoint.
func (s *Store) DeliveriesOfEvent(ctx context.Context, account, eventID string) ([]Delivery, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhooks.deliveries
		WHERE event_id = $2 AND ($1 = '' OR account = $1) ORDER BY endpoint_id, account`, account, eventID)
	if err != nil {
		return nil, fmt.Errorf("reading deliveries of event %s: %s", eventID, oneLine(err))
	}
	return collectDeliveries(rows)
}

// AttemptsOfDelivery returns the attempt timeline of the delivery
// deliveryID of account, oldest first, at most limit rows (0: 1000).
// Account is required: attempts another account's records made under the
// same delivery id never show. Rows logged before attempts carried their
// account count as the delivery row's.
func (s *Store) AttemptsOfDelivery(ctx context.Context, account, deliveryID string, limit int) ([]Attempt, error) {
	if account == "" {
		return nil, fmt.Errorf("reading attempts of %s: the delivery's account is required", deliveryID)
	}
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.pool.Query(ctx, `SELECT attempt_id, delivery_id, attempt, tier, started_at, duration_ms,
		status_code, outcome, error_class, error, response_excerpt, next_action, replay_id, destination, body_sha256
		FROM webhooks.attempts a
		WHERE delivery_id = $2 AND (account = $1 OR (account IS NULL AND EXISTS (
			SELECT 1 FROM webhooks.deliveries d WHERE d.id = a.delivery_id AND d.account = $1)))
		ORDER BY started_at, attempt, attempt_id LIMIT $3`, account, deliveryID, limit)
	if err != nil {
		return nil, fmt.Errorf("reading attempts of %s: %s", deliveryID, oneLine(err))
	}
	defer rows.Close()
	out := []Attempt{}
	for rows.Next() {
		var (
			a                           Attempt
			code                        *int32
			class, msg, excerpt, replay *string
			dest, digest                *string
		)
		if err := rows.Scan(&a.AttemptID, &a.DeliveryID, &a.Attempt, &a.Tier, &a.StartedAt, &a.DurationMS, &code,
			&a.Outcome, &class, &msg, &excerpt, &a.NextAction, &replay, &dest, &digest); err != nil {
			return nil, fmt.Errorf("reading attempts of %s: %s", deliveryID, oneLine(err))
		}
		if code != nil {
			a.StatusCode = int(*code)
		}
		a.ErrorClass, a.Error, a.ResponseExcerpt, a.ReplayID = deref(class), deref(msg), deref(excerpt), deref(replay)
		a.Destination, a.BodySHA256 = deref(dest), deref(digest)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading attempts of %s: %s", deliveryID, oneLine(err))
	}
	return out, nil
}

// DeliveryKey names one account's delivery: a delivery row counts only for
// the account it belongs to.
type DeliveryKey struct {
	Account string
	ID      string
}

// Delivered returns the keys, among keys, whose delivery row is in state
// delivered (the endpoint answered 2xx to its newest attempt, for example
// after a replay of its dead letter). One query answers a whole batch; a
// key of another account's row, or of no row, is absent.
func (s *Store) Delivered(ctx context.Context, keys []DeliveryKey) (map[DeliveryKey]bool, error) {
	out := map[DeliveryKey]bool{}
	if len(keys) == 0 {
		return out, nil
	}
	asked := make(map[DeliveryKey]bool, len(keys))
	ids := make([]string, 0, len(keys))
	for _, k := range keys {
		if !asked[k] {
			asked[k] = true
			ids = append(ids, k.ID)
		}
	}
	// id is the primary key: one index scan over the batch's ids (twice
	// as fast as joining (account, id) pairs); the account is compared
	// below, so another account's row never answers for a key.
	rows, err := s.pool.Query(ctx, `SELECT account, id FROM webhooks.deliveries
		WHERE id = ANY($1) AND status = 'delivered'`, ids)
	if err != nil {
		return nil, fmt.Errorf("looking up delivered deliveries: %s", oneLine(err))
	}
	defer rows.Close()
	for rows.Next() {
		var k DeliveryKey
		if err := rows.Scan(&k.Account, &k.ID); err != nil {
			return nil, fmt.Errorf("looking up delivered deliveries: %s", oneLine(err))
		}
		if asked[k] {
			out[k] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("looking up delivered deliveries: %s", oneLine(err))
	}
	return out, nil
}
