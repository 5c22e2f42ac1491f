package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Portal access levels, as stored in webhooks.portal_links.level and
// webhooks.portal_sessions.level.
const (
	// PortalRead sees an account's endpoints, deliveries and replays.
	PortalRead = "read"
	// PortalManage also edits endpoints, rotates secrets, sends test events
	// and replays.
	PortalManage = "manage"
	// PortalSupport is a session signed in with the admin token: it
	// searches every account and acts on behalf of one at a time.
	PortalSupport = "support"
)

// Why a portal link or session cannot be used.
var (
	// ErrLinkExpired: the link's lifetime is over.
	ErrLinkExpired = errors.New("portal link expired")
	// ErrLinkUsed: the link opened a session already (links are single-use).
	ErrLinkUsed = errors.New("portal link already used")
	// ErrSessionEnded: the session was signed out, or passed its idle or
	// absolute limit.
	ErrSessionEnded = errors.New("portal session ended")
)

// PortalLink is a one-time portal link. Its token is never stored, only
// its SHA-256.
type PortalLink struct {
	ID         string     `json:"id"`
	Account    string     `json:"account"`
	EndpointID string     `json:"endpoint,omitempty"`
	Level      string     `json:"level"`
	CreatedBy  string     `json:"created_by"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	UsedAt     *time.Time `json:"used_at,omitempty"`
}

// portalLinkPrefix starts every link token, so that a leaked one is easy to
// recognise and to tell from an API token.
const portalLinkPrefix = "hpl_"

// CreatePortalLinkParams is a link to create.
type CreatePortalLinkParams struct {
	Account string
	// EndpointID, when set, limits the link to that endpoint of Account;
	// ErrNotFound when Account has no such endpoint.
	EndpointID string
	// Level is PortalRead or PortalManage.
	Level     string
	CreatedBy string
	TTL       time.Duration
}

// Bounds of a portal link's lifetime.
const (
	// PortalLinkTTL is the lifetime of a link when none is asked for.
	PortalLinkTTL = time.Hour
	// MaxPortalLinkTTL is the longest lifetime a link may have.
	MaxPortalLinkTTL = 24 * time.Hour
)

// ErrInvalidLink wraps what is wrong with the parameters of a new link.
var ErrInvalidLink = errors.New("invalid portal link")

func (p *CreatePortalLinkParams) validate() error {
	switch {
	case p.Level != PortalRead && p.Level != PortalManage:
		return fmt.Errorf("%w: level %q: must be read or manage", ErrInvalidLink, p.Level)
	case p.TTL > MaxPortalLinkTTL:
		return fmt.Errorf("%w: ttl %s: at most %s", ErrInvalidLink, p.TTL, MaxPortalLinkTTL)
	case p.Account == "":
		return fmt.Errorf("%w: an account is required", ErrInvalidLink)
	}
	return nil
}

// CreatePortalLink stores a new link and returns it with its token ("hpl_"
// and 256 random bits), which is not stored and cannot be shown again. A
// TTL of zero means PortalLinkTTL; a negative one makes an expired link
// (tests). ErrInvalidLink for a bad level or TTL; ErrNotFound when the
// endpoint is not one of the account's.
func (s *Store) CreatePortalLink(ctx context.Context, p CreatePortalLinkParams) (PortalLink, string, error) {
	if p.TTL == 0 {
		p.TTL = PortalLinkTTL
	}
	if err := p.validate(); err != nil {
		return PortalLink{}, "", err
	}
	token := portalLinkPrefix + randomToken()
	var l PortalLink
	var ep *string
	err := s.pool.QueryRow(ctx, `INSERT INTO webhooks.portal_links (id, token_sha256, account, endpoint_id, level, created_by, expires_at)
		SELECT $1, $2, $3, NULLIF($4, ''), $5, $6, now() + make_interval(secs => $7::float8)
		WHERE $4 = '' OR EXISTS (SELECT 1 FROM webhooks.endpoints e WHERE e.id = $4 AND e.account = $3)
		RETURNING id, account, endpoint_id, level, created_by, created_at, expires_at`,
		"pl_"+randomHex(8), HashToken(token), p.Account, p.EndpointID, p.Level, p.CreatedBy, p.TTL.Seconds()).
		Scan(&l.ID, &l.Account, &ep, &l.Level, &l.CreatedBy, &l.CreatedAt, &l.ExpiresAt)
	if err != nil {
		if errors.Is(translate(err), ErrNotFound) {
			return l, "", fmt.Errorf("endpoint %s of account %s: %w", p.EndpointID, p.Account, ErrNotFound)
		}
		return l, "", fmt.Errorf("creating portal link: %s", oneLine(err))
	}
	l.EndpointID = deref(ep)
	return l, token, nil
}

// PortalLinkByToken returns the link of token whatever its state (the
// caller checks UsedAt and ExpiresAt), or ErrNotFound. It changes nothing.
func (s *Store) PortalLinkByToken(ctx context.Context, token string) (PortalLink, error) {
	var l PortalLink
	var ep *string
	err := s.pool.QueryRow(ctx, `SELECT id, account, endpoint_id, level, created_by, created_at, expires_at, used_at
		FROM webhooks.portal_links WHERE token_sha256 = $1`, HashToken(token)).
		Scan(&l.ID, &l.Account, &ep, &l.Level, &l.CreatedBy, &l.CreatedAt, &l.ExpiresAt, &l.UsedAt)
	if err != nil {
		if err = translate(err); errors.Is(err, ErrNotFound) {
			return l, ErrNotFound
		}
		return l, fmt.Errorf("reading portal link: %s", oneLine(err))
	}
	l.EndpointID = deref(ep)
	return l, nil
}

// PortalSession is a browser session of the portal.
type PortalSession struct {
	ID string
	// Account is empty for a support session not acting for an account.
	Account    string
	EndpointID string
	Level      string
	LinkID     string
	CSRFToken  string
	// Flash is the one-time notice taken with this read, if any.
	Flash      json.RawMessage
	CreatedAt  time.Time
	LastSeenAt time.Time
}

const portalSessionColumns = `s.id, s.account, s.endpoint_id, s.level, s.link_id, s.csrf_token, s.created_at, s.last_seen_at`

func scanPortalSession(row pgx.Row, extra ...any) (PortalSession, error) {
	var ps PortalSession
	var account, ep, link *string
	dest := append([]any{&ps.ID, &account, &ep, &ps.Level, &link, &ps.CSRFToken, &ps.CreatedAt, &ps.LastSeenAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return ps, translate(err)
	}
	ps.Account, ps.EndpointID, ps.LinkID = deref(account), deref(ep), deref(link)
	return ps, nil
}

// OpenPortalSession uses the link of linkToken, in one transaction: the
// link is marked used and a session bound to its account, endpoint and
// level is created. It returns the session and its cookie token, or
// ErrLinkExpired, ErrLinkUsed or ErrNotFound (no such link).
func (s *Store) OpenPortalSession(ctx context.Context, linkToken string) (PortalSession, string, error) {
	var out PortalSession
	token := "hps_" + randomToken()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var l PortalLink
		var ep *string
		err := tx.QueryRow(ctx, `UPDATE webhooks.portal_links SET used_at = now()
			WHERE token_sha256 = $1 AND used_at IS NULL AND expires_at > now()
			RETURNING id, account, endpoint_id, level`, HashToken(linkToken)).Scan(&l.ID, &l.Account, &ep, &l.Level)
		if errors.Is(translate(err), ErrNotFound) {
			return s.linkRefusal(ctx, linkToken)
		}
		if err != nil {
			return fmt.Errorf("using portal link: %s", oneLine(err))
		}
		out, err = insertPortalSession(ctx, tx, token, l.Account, deref(ep), l.Level, l.ID)
		return err
	})
	return out, token, err
}

// linkRefusal says why a link could not be used.
func (s *Store) linkRefusal(ctx context.Context, token string) error {
	l, err := s.PortalLinkByToken(ctx, token)
	switch {
	case err != nil:
		return err
	case l.UsedAt != nil:
		return ErrLinkUsed
	default:
		return ErrLinkExpired
	}
}

// OpenSupportSession creates a support session (the caller checked the
// admin token) and returns it with its cookie token.
func (s *Store) OpenSupportSession(ctx context.Context) (PortalSession, string, error) {
	token := "hps_" + randomToken()
	ps, err := insertPortalSession(ctx, s.pool, token, "", "", PortalSupport, "")
	return ps, token, err
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func insertPortalSession(ctx context.Context, q querier, token, account, endpointID, level, linkID string) (PortalSession, error) {
	ps, err := scanPortalSession(q.QueryRow(ctx, `INSERT INTO webhooks.portal_sessions AS s
		(id, token_sha256, account, endpoint_id, level, link_id, csrf_token)
		VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, ''), $5, NULLIF($6, ''), $7)
		RETURNING `+portalSessionColumns,
		"ps_"+randomHex(8), HashToken(token), account, endpointID, level, linkID, randomToken()))
	if err != nil {
		return ps, fmt.Errorf("creating portal session: %s", oneLine(err))
	}
	return ps, nil
}

// SessionLimits bound a portal session's life.
type SessionLimits struct {
	// Idle ends a session not used for this long.
	Idle time.Duration
	// Max ends a session this long after it was created.
	Max time.Duration
}

// PortalSessionByToken returns the live session of a cookie token and
// marks it used now; takeFlash also takes (and clears) its one-time
// notice. ErrSessionEnded when it was revoked or passed a limit,
// ErrNotFound when there is no such session.
func (s *Store) PortalSessionByToken(ctx context.Context, token string, lim SessionLimits, takeFlash bool) (PortalSession, error) {
	var flash []byte
	ps, err := scanPortalSession(s.pool.QueryRow(ctx, `UPDATE webhooks.portal_sessions s SET last_seen_at = now(),
			flash = CASE WHEN $2 THEN NULL ELSE s.flash END
		FROM (SELECT id, flash FROM webhooks.portal_sessions WHERE token_sha256 = $1 FOR UPDATE) old
		WHERE s.id = old.id AND s.revoked_at IS NULL
			AND s.last_seen_at > now() - make_interval(secs => $3::float8)
			AND s.created_at > now() - make_interval(secs => $4::float8)
		RETURNING `+portalSessionColumns+`, CASE WHEN $2 THEN old.flash END`,
		HashToken(token), takeFlash, lim.Idle.Seconds(), lim.Max.Seconds()), &flash)
	if errors.Is(err, ErrNotFound) {
		return ps, s.sessionRefusal(ctx, token)
	}
	if err != nil {
		return ps, fmt.Errorf("reading portal session: %s", oneLine(err))
	}
	ps.Flash = flash
	return ps, nil
}

func (s *Store) sessionRefusal(ctx context.Context, token string) error {
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM webhooks.portal_sessions WHERE token_sha256 = $1`, HashToken(token)).Scan(&one)
	switch err = translate(err); {
	case err == nil:
		return ErrSessionEnded
	case errors.Is(err, ErrNotFound):
		return ErrNotFound
	default:
		return fmt.Errorf("reading portal session: %s", oneLine(err))
	}
}

// RevokePortalSession ends a session (sign-out); revoking an ended one is
// not an error.
func (s *Store) RevokePortalSession(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE webhooks.portal_sessions SET revoked_at = COALESCE(revoked_at, now()) WHERE id = $1`, id); err != nil {
		return fmt.Errorf("revoking portal session %s: %s", id, oneLine(err))
	}
	return nil
}

// SetPortalSessionAccount makes a support session act on behalf of
// account (empty: of none).
func (s *Store) SetPortalSessionAccount(ctx context.Context, id, account string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE webhooks.portal_sessions SET account = NULLIF($2, '')
		WHERE id = $1 AND level = 'support' AND revoked_at IS NULL`, id, account)
	if err != nil {
		return fmt.Errorf("switching portal session %s: %s", id, oneLine(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("support session %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetPortalFlash stores the one-time notice the session's next page shows.
func (s *Store) SetPortalFlash(ctx context.Context, id string, flash json.RawMessage) error {
	if _, err := s.pool.Exec(ctx, `UPDATE webhooks.portal_sessions SET flash = $2 WHERE id = $1`, id, flash); err != nil {
		return fmt.Errorf("saving portal notice: %s", oneLine(err))
	}
	return nil
}

// PortalAuditEntry is one row of the portal's audit trail.
type PortalAuditEntry struct {
	At      time.Time
	Actor   string
	Account string
	Action  string
	Target  string
	Detail  string
}

// AddPortalAudit records an action taken in the portal.
func (s *Store) AddPortalAudit(ctx context.Context, e PortalAuditEntry) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO webhooks.portal_audit (actor, account, action, target, detail)
		VALUES ($1, NULLIF($2, ''), $3, $4, $5)`, e.Actor, e.Account, e.Action, e.Target, e.Detail)
	if err != nil {
		return fmt.Errorf("recording portal audit: %s", oneLine(err))
	}
	return nil
}

// ListPortalAudit returns the newest audit rows of account (AnyAccount:
// every account's), at most limit.
func (s *Store) ListPortalAudit(ctx context.Context, account string, limit int) ([]PortalAuditEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT at, actor, COALESCE(account, ''), action, target, detail
		FROM webhooks.portal_audit WHERE ($1 = '' OR account = $1) ORDER BY at DESC, id DESC LIMIT $2`, account, limit)
	if err != nil {
		return nil, fmt.Errorf("listing portal audit: %s", oneLine(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PortalAuditEntry, error) {
		var e PortalAuditEntry
		return e, row.Scan(&e.At, &e.Actor, &e.Account, &e.Action, &e.Target, &e.Detail)
	})
	if err != nil {
		return nil, fmt.Errorf("listing portal audit: %s", oneLine(err))
	}
	return out, nil
}

// ListPortalReplays returns the replay audit rows of account (AnyAccount:
// every replay) that are not dry runs, newest first; with endpointID, only
// those whose filter names that endpoint.
func (s *Store) ListPortalReplays(ctx context.Context, account, endpointID string, limit int) ([]Replay, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+replayColumns+` FROM webhooks.replays
		WHERE NOT dry_run AND ($1 = '' OR account = $1) AND ($2 = '' OR filter->>'endpoint' = $2)
		ORDER BY created_at DESC, id LIMIT $3`, account, endpointID, limit)
	if err != nil {
		return nil, fmt.Errorf("listing replays: %s", oneLine(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Replay, error) { return scanReplay(row) })
	if err != nil {
		return nil, fmt.Errorf("listing replays: %s", oneLine(err))
	}
	return out, nil
}

func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DeliveryCursor is a position in the delivery log: the (created_at, id)
// of a row.
type DeliveryCursor struct {
	CreatedAt time.Time
	ID        string
}

// DeliveryLogParams selects a page of the delivery log.
type DeliveryLogParams struct {
	// Account is required: the log is read for one account only.
	Account string
	// EndpointID, Status, EventType and EventID match exactly when set.
	EndpointID string
	Status     string
	EventType  string
	EventID    string
	// StatusClass, when 2 to 5, keeps the rows whose last HTTP status is
	// in that hundred (2xx ... 5xx); -1 keeps those without one (no
	// answer, or not attempted yet).
	StatusClass int
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	// Oldest orders oldest first; the default is newest first.
	Oldest bool
	// After, when set, pages on from that row: towards older rows
	// (towards newer ones with Oldest), or back with Back.
	After *DeliveryCursor
	// Back pages the other way from After.
	Back bool
	// Limit caps the rows. Defaults to 50.
	Limit int
}

// DeliveryLog returns one page of the delivery log in display order, and
// whether more rows lie beyond it in the direction read. It counts nothing
// (no totals): each page is one index range scan.
func (s *Store) DeliveryLog(ctx context.Context, p DeliveryLogParams) ([]Delivery, bool, error) {
	if p.Account == "" {
		return nil, false, errors.New("reading the delivery log: an account is required")
	}
	if p.Limit <= 0 {
		p.Limit = 50
	}
	// Reading newest first unless (Oldest xor Back).
	desc := p.Oldest == p.Back
	where, args := deliveryLogWhere(p, desc)
	order := "created_at DESC, id DESC"
	if !desc {
		order = "created_at, id"
	}
	args = append(args, p.Limit+1)
	rows, err := s.pool.Query(ctx, `SELECT `+deliveryColumns+` FROM webhooks.deliveries WHERE `+where+
		` ORDER BY `+order+fmt.Sprintf(` LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, false, fmt.Errorf("reading the delivery log: %s", oneLine(err))
	}
	out, err := collectDeliveries(rows)
	if err != nil {
		return nil, false, err
	}
	more := len(out) > p.Limit
	if more {
		out = out[:p.Limit]
	}
	if p.Back {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, more, nil
}

func deliveryLogWhere(p DeliveryLogParams, desc bool) (string, []any) {
	c := conds{where: "account = $1", args: []any{p.Account}}
	if p.EndpointID != "" {
		c.add("endpoint_id = $%d", p.EndpointID)
	}
	if p.Status != "" {
		c.add("status = $%d", p.Status)
		c.where += notDelivered(p.Status)
	}
	if p.EventType != "" {
		c.add("event_type = $%d", p.EventType)
	}
	if p.EventID != "" {
		c.add("event_id = $%d", p.EventID)
	}
	switch {
	case p.StatusClass == -1:
		c.where += " AND last_status_code IS NULL"
	case p.StatusClass >= 2 && p.StatusClass <= 5:
		c.add("last_status_code / 100 = $%d", p.StatusClass)
	}
	if !p.Since.IsZero() {
		c.add("created_at >= $%d", p.Since)
	}
	if !p.Until.IsZero() {
		c.add("created_at < $%d", p.Until)
	}
	if p.After != nil {
		op := ">"
		if desc {
			op = "<"
		}
		c.args = append(c.args, p.After.CreatedAt, p.After.ID)
		c.where += fmt.Sprintf(" AND (created_at, id) %s ($%d, $%d)", op, len(c.args)-1, len(c.args))
	}
	return c.where, c.args
}

// EndpointStats is the health of one endpoint over a window, from the
// attempt log.
type EndpointStats struct {
	// Delivered and Failed count attempts answered 2xx, and attempts that
	// failed (retried, gone, permanent, refused); attempts that made no
	// request (circuit open, deferred, skipped) count in neither.
	Delivered, Failed int64
	// P50 is the median duration of the attempts that made a request,
	// estimated from latency buckets (within 4.5%); zero when there were
	// none.
	P50 time.Duration
	// LastSuccessAt and LastFailureAt are zero when none was ever seen.
	LastSuccessAt, LastFailureAt time.Time
}

// PortalEndpointStats returns, for the endpoints ids of account, their
// attempt counts and median latency since since, and their last success
// and failure ever. The counts are exact: the whole hours come from the
// hourly rollup (webhooks.attempt_hours_all: with the deltas not folded
// yet), the part of an hour after since
// from the attempt log; the median is estimated from latency buckets
// (latencyHist.percentile).
func (s *Store) PortalEndpointStats(ctx context.Context, account string, ids []string, since time.Time) (map[string]EndpointStats, error) {
	out := make(map[string]EndpointStats, len(ids))
	hists := map[string]latencyHist{}
	wholeHours := since.Truncate(time.Hour)
	if wholeHours.Before(since) {
		wholeHours = wholeHours.Add(time.Hour)
	}
	rows, err := s.pool.Query(ctx, statsSQL, account, ids, since, wholeHours)
	if err != nil {
		return nil, fmt.Errorf("reading endpoint stats: %s", oneLine(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                string
			delivered, failed int64
			latency           []int64
		)
		if err := rows.Scan(&id, &delivered, &failed, &latency); err != nil {
			return nil, fmt.Errorf("reading endpoint stats: %s", oneLine(err))
		}
		st := out[id]
		st.Delivered, st.Failed = st.Delivered+delivered, st.Failed+failed
		out[id] = st
		if hists[id] == nil {
			hists[id] = latencyHist{}
		}
		hists[id].add(latency)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading endpoint stats: %s", oneLine(err))
	}
	for id, h := range hists {
		st := out[id]
		st.P50 = h.percentile(0.5)
		out[id] = st
	}
	return out, s.lastOutcomes(ctx, ids, out)
}

// statsSQL reads the rows of the attempts that made a request, per
// endpoint: the rollup's whole hours from $4, and the log's rows in
// [$3, $4) rolled up the same way (summed in Go).
var statsSQL = `SELECT endpoint_id, delivered, failed, latency FROM webhooks.attempt_hours_all
	WHERE endpoint_id = ANY($2) AND hour >= $4 AND account IN ($1, '')
UNION ALL
SELECT endpoint_id, delivered, failed, latency FROM (` +
	hoursOf(bucketsOf("''", "webhooks.attempts", "endpoint_id = ANY($2) AND started_at >= $3 AND started_at < $4 AND (account = $1 OR account IS NULL) AND")) +
	`) l`

// lastOutcomes adds the last success and failure ever of ids to out.
func (s *Store) lastOutcomes(ctx context.Context, ids []string, out map[string]EndpointStats) error {
	rows, err := s.pool.Query(ctx, `SELECT endpoint_id, last_success_at, last_failure_at
		FROM webhooks.endpoint_health WHERE endpoint_id = ANY($1)`, ids)
	if err != nil {
		return fmt.Errorf("reading endpoint health: %s", oneLine(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id               string
			success, failure *time.Time
		)
		if err := rows.Scan(&id, &success, &failure); err != nil {
			return fmt.Errorf("reading endpoint health: %s", oneLine(err))
		}
		st := out[id]
		st.LastSuccessAt, st.LastFailureAt = timeOrZero(success), timeOrZero(failure)
		out[id] = st
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading endpoint health: %s", oneLine(err))
	}
	return nil
}

// OutcomeCount is a number of attempts (by outcome class) or deliveries
// (by event type and state).
type OutcomeCount struct {
	// Key is the outcome class (2xx, 4xx, 5xx, timeout, dns, tls,
	// refused, or the error class) or the event type.
	Key string
	// Status is the delivery state, for counts by event type.
	Status string
	N      int64
}

// PortalOutcomeClasses counts the attempts of endpoint endpointID of
// account since since by outcome class.
func (s *Store) PortalOutcomeClasses(ctx context.Context, account, endpointID string, since time.Time) ([]OutcomeCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT CASE
			WHEN outcome = 'delivered' THEN '2xx'
			WHEN error_class IN ('timeout', 'connect_timeout') THEN 'timeout'
			WHEN error_class = 'dns_error' THEN 'dns'
			WHEN error_class = 'tls_error' THEN 'tls'
			WHEN error_class = 'connect_refused' THEN 'refused'
			WHEN status_code BETWEEN 400 AND 499 THEN '4xx'
			WHEN status_code BETWEEN 500 AND 599 THEN '5xx'
			ELSE COALESCE(NULLIF(error_class, ''), outcome) END AS class, '', count(*)
		FROM webhooks.attempts
		WHERE endpoint_id = $2 AND started_at >= $3 AND (account = $1 OR account IS NULL)
		GROUP BY 1 ORDER BY 3 DESC, 1`, account, endpointID, since)
	return collectCounts(rows, err)
}

// PortalTypeCounts counts the deliveries of endpoint endpointID of account
// created since since, by event type and state.
func (s *Store) PortalTypeCounts(ctx context.Context, account, endpointID string, since time.Time) ([]OutcomeCount, error) {
	rows, err := s.pool.Query(ctx, `SELECT event_type, status, count(*) FROM webhooks.deliveries
		WHERE endpoint_id = $2 AND account = $1 AND created_at >= $3
		GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 500`, account, endpointID, since)
	return collectCounts(rows, err)
}

func collectCounts(rows pgx.Rows, err error) ([]OutcomeCount, error) {
	if err != nil {
		return nil, fmt.Errorf("counting attempts: %s", oneLine(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (OutcomeCount, error) {
		var c OutcomeCount
		return c, row.Scan(&c.Key, &c.Status, &c.N)
	})
	if err != nil {
		return nil, fmt.Errorf("counting attempts: %s", oneLine(err))
	}
	return out, nil
}

// PortalSearchHit is one thing a support search found.
type PortalSearchHit struct {
	// Kind is account, endpoint, delivery or event; ID is the account,
	// endpoint or delivery id (for an event: of each of its deliveries).
	Kind    string
	ID      string
	Account string
	Detail  string
}

// PortalSearch finds, across accounts, the endpoint (live or deleted),
// delivery or event with id q, and the accounts whose name starts with q
// (with their live endpoints counted apart from deleted ones); at most 50
// hits.
func (s *Store) PortalSearch(ctx context.Context, q string) ([]PortalSearchHit, error) {
	rows, err := s.pool.Query(ctx, `
		(SELECT 'endpoint', id, account, CASE WHEN deleted_at IS NULL THEN '' ELSE 'deleted' END
			FROM webhooks.endpoint_ids WHERE id = $1)
		UNION ALL
		(SELECT 'delivery', id, account, event_type || ' to ' || endpoint_id || ', ' || status
			FROM webhooks.deliveries WHERE id = $1)
		UNION ALL
		(SELECT 'event', id, account, 'event ' || event_id || ': ' || event_type || ' to ' || endpoint_id || ', ' || status
			FROM webhooks.deliveries WHERE event_id = $1 ORDER BY account, endpoint_id LIMIT 20)
		UNION ALL
		(SELECT 'account', account, account, count(*) FILTER (WHERE deleted_at IS NULL) || ' endpoint(s)'
				|| CASE WHEN count(*) FILTER (WHERE deleted_at IS NOT NULL) > 0
					THEN ', ' || count(*) FILTER (WHERE deleted_at IS NOT NULL) || ' deleted' ELSE '' END
			FROM webhooks.endpoint_ids WHERE starts_with(account, $1) GROUP BY account ORDER BY account LIMIT 20)
		LIMIT 50`, q)
	if err != nil {
		return nil, fmt.Errorf("searching: %s", oneLine(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (PortalSearchHit, error) {
		var h PortalSearchHit
		return h, row.Scan(&h.Kind, &h.ID, &h.Account, &h.Detail)
	})
	if err != nil {
		return nil, fmt.Errorf("searching: %s", oneLine(err))
	}
	return out, nil
}

// PrunePortal deletes the links that expired before before and the
// sessions created before it (ended by their absolute limit by then). The
// portal's audit rows are kept.
func (s *Store) PrunePortal(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `WITH l AS (DELETE FROM webhooks.portal_links WHERE expires_at < $1 RETURNING 1),
		ps AS (DELETE FROM webhooks.portal_sessions WHERE created_at < $1 RETURNING 1)
		SELECT (SELECT count(*) FROM l) + (SELECT count(*) FROM ps)`, before).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("pruning portal links and sessions: %s", oneLine(err))
	}
	return n, nil
}

// ChartBucket is one bucket of a portal chart: the attempts started in
// [Start, End).
type ChartBucket struct {
	Start, End time.Time
	// Delivered and Failed count attempts as EndpointStats does.
	Delivered, Failed int64
	// P50 and P99 are the duration percentiles of the attempts that made
	// a request, estimated from the rollup's latency buckets (within 4.5%
	// of percentile_cont's); zero when there were none.
	P50, P99 time.Duration
}

// PortalChartParams selects the attempts of a portal chart.
type PortalChartParams struct {
	Account string
	// EndpointIDs are the endpoints charted (all of Account's, or one).
	EndpointIDs []string
	// Bounds are the bucket edges, ascending: len(Bounds)-1 buckets. With
	// a nil Zone they are whole hours apart; with a Zone, local midnights
	// of Zone (a day bucket is a local day even across a DST change).
	Bounds []time.Time
	Zone   *time.Location
}

// PortalChart counts, per bucket, the delivered and failed attempts of
// p.EndpointIDs of p.Account and estimates their p50 and p99 durations. It
// reads the hourly rollup (webhooks.attempt_hours_all: with the deltas not
// folded yet), never the attempt log:
// a bucket is the sum of the UTC hours that start in it, so in a zone whose
// offset is not whole hours a local day is counted from the first whole
// hour after its midnight; percentiles come from latency buckets 4.5% wide
// above 16 ms (latencyHist.percentile).
func (s *Store) PortalChart(ctx context.Context, p PortalChartParams) ([]ChartBucket, error) {
	if len(p.Bounds) < 2 {
		return nil, nil
	}
	out := make([]ChartBucket, len(p.Bounds)-1)
	hists := make([]latencyHist, len(out))
	at := make(map[int64]int, len(out))
	for i := range out {
		out[i].Start, out[i].End = p.Bounds[i], p.Bounds[i+1]
		hists[i] = latencyHist{}
		at[p.Bounds[i].Unix()] = i
	}
	zone := ""
	if p.Zone != nil {
		zone = p.Zone.String()
	}
	rows, err := s.pool.Query(ctx, chartSQL, p.Account, p.EndpointIDs, p.Bounds[0], p.Bounds[len(p.Bounds)-1], zone)
	if err != nil {
		return nil, fmt.Errorf("reading chart: %s", oneLine(err))
	}
	if err := scanChart(rows, out, hists, at); err != nil {
		return nil, fmt.Errorf("reading chart: %s", oneLine(err))
	}
	for i, h := range hists {
		out[i].P50, out[i].P99 = h.percentile(0.5), h.percentile(0.99)
	}
	return out, nil
}

func scanChart(rows pgx.Rows, out []ChartBucket, hists []latencyHist, at map[int64]int) error {
	defer rows.Close()
	for rows.Next() {
		var (
			start             time.Time
			delivered, failed int64
			latency           []int64
		)
		if err := rows.Scan(&start, &delivered, &failed, &latency); err != nil {
			return err
		}
		i, found := at[start.Unix()]
		if !found {
			continue // not a bucket edge: cannot happen with edges made as documented
		}
		out[i].Delivered += delivered
		out[i].Failed += failed
		hists[i].add(latency)
	}
	return rows.Err()
}

// chartSQL reads the rollup's hours with the chart bucket of each (summed
// in Go): per hour from $3 when $5 is empty, else per local day of zone
// $5. Rows of attempts logged with no account (before schema version 5)
// have an empty account and are charted for the endpoint's account, as the log's
// were.
const chartSQL = `SELECT CASE WHEN $5 = '' THEN date_bin('1 hour', hour, $3) ELSE date_trunc('day', hour, $5) END,
		delivered, failed, latency
	FROM webhooks.attempt_hours_all
	WHERE endpoint_id = ANY($2) AND hour >= $3 AND hour < $4 AND account IN ($1, '')`
