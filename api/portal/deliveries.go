package portal

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// endpointFor loads endpoint id if the session may see it: an endpoint of
// its account, and the session's endpoint when it is limited to one.
// Anything else is errNotFound, exactly as a missing endpoint.
func (h *Handler) endpointFor(ctx context.Context, s *session, id string) (endpoint.Endpoint, error) {
	if endpoint.ValidateID(id) != nil || (s.EndpointID != "" && id != s.EndpointID) {
		return endpoint.Endpoint{}, errNotFound
	}
	e, err := h.store().GetEndpoint(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && e.Account != s.Account) {
		return e, errNotFound
	}
	return e, err
}

// deliveryFor loads delivery id if the session may see it.
func (h *Handler) deliveryFor(ctx context.Context, s *session, id string) (store.Delivery, error) {
	if endpoint.ValidateID(id) != nil {
		return store.Delivery{}, errNotFound
	}
	d, err := h.store().GetDelivery(ctx, s.Account, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && (d.Account != s.Account || (s.EndpointID != "" && d.EndpointID != s.EndpointID))) {
		return d, errNotFound
	}
	return d, err
}

// logQuery is the delivery log's filter form, as given.
type logQuery struct {
	Endpoint, Status, Code, Type, Event, Range, Since, Until, Order string
}

func (q logQuery) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"endpoint": q.Endpoint, "status": q.Status, "code": q.Code, "type": q.Type, "event": q.Event,
		"range": q.Range, "since": q.Since, "until": q.Until, "order": q.Order} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// codeClasses are the HTTP status filters of the delivery log.
var codeClasses = map[string]int{"2xx": 2, "3xx": 3, "4xx": 4, "5xx": 5, "none": -1}

// Ranges are the time presets of the delivery log.
var ranges = map[string]time.Duration{"1h": time.Hour, "24h": 24 * time.Hour, "7d": 7 * 24 * time.Hour, "30d": 30 * 24 * time.Hour}

// parseLogQuery reads the filters of the delivery log into store params.
func (h *Handler) parseLogQuery(ctx context.Context, s *session, v url.Values) (logQuery, store.DeliveryLogParams, error) {
	q := logQuery{Endpoint: v.Get("endpoint"), Status: v.Get("status"), Code: v.Get("code"), Type: strings.TrimSpace(v.Get("type")),
		Event: strings.TrimSpace(v.Get("event")), Range: v.Get("range"), Since: strings.TrimSpace(v.Get("since")),
		Until: strings.TrimSpace(v.Get("until")), Order: v.Get("order")}
	p := store.DeliveryLogParams{Account: s.Account, EndpointID: s.EndpointID, Status: q.Status, EventType: q.Type,
		EventID: q.Event, Limit: h.cfg.PageSize, Oldest: q.Order == "oldest"}
	if q.Endpoint != "" {
		if _, err := h.endpointFor(ctx, s, q.Endpoint); err != nil {
			return q, p, err
		}
		p.EndpointID = q.Endpoint
	}
	switch {
	case q.Status != "" && q.Status != "pending" && q.Status != "retrying" && q.Status != "delivered" && q.Status != "dead":
		return q, p, badInput("state: must be pending, retrying, delivered or dead-lettered, got %q", clip(q.Status))
	case q.Code != "" && codeClasses[q.Code] == 0:
		return q, p, badInput("HTTP status: must be 2xx, 3xx, 4xx, 5xx or none, got %q", clip(q.Code))
	case q.Order != "" && q.Order != "newest" && q.Order != "oldest":
		return q, p, badInput("order: must be newest or oldest first")
	case q.Type != "" && endpoint.ValidateID(q.Type) != nil:
		return q, p, badInput("event type: 1..255 printable characters without spaces, got %q", clip(q.Type))
	case q.Event != "" && endpoint.ValidateID(q.Event) != nil:
		return q, p, badInput("event id: 1..255 printable characters without spaces, got %q", clip(q.Event))
	}
	p.StatusClass = codeClasses[q.Code]
	var err error
	if p.Since, p.Until, err = h.timeRange(q); err != nil {
		return q, p, err
	}
	if c := v.Get("cursor"); c != "" {
		if p.After, p.Back, err = parseCursor(c); err != nil {
			return q, p, err
		}
	}
	return q, p, nil
}

// timeRange reads since/until (RFC 3339, or a date and time in UTC) or a
// preset range.
func (h *Handler) timeRange(q logQuery) (since, until time.Time, err error) {
	if q.Range != "" && q.Range != "custom" {
		d, ok := ranges[q.Range]
		if !ok {
			return since, until, badInput("time range: must be 1h, 24h, 7d, 30d or custom, got %q", clip(q.Range))
		}
		since = h.now().Add(-d)
	}
	if q.Since != "" {
		if since, err = parseUTC("from", q.Since); err != nil {
			return since, until, err
		}
	}
	if q.Until != "" {
		if until, err = parseUTC("to", q.Until); err != nil {
			return since, until, err
		}
	}
	if !since.IsZero() && !until.IsZero() && !since.Before(until) {
		return since, until, badInput("time range: from (%s) must be before to (%s)", formatTime(since), formatTime(until))
	}
	return since, until, nil
}

// parseUTC reads a time typed by a person: RFC 3339, or a date with an
// optional time of day, in UTC.
func parseUTC(field, s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, badInput("%s: %q is not a time; write 2026-05-01T10:00:00Z (UTC) or 2026-05-01", field, clip(s))
}

// A cursor is opaque to the browser: base64 of "v1|<µs>|<id>|<back>".
func makeCursor(d store.Delivery, back bool) string {
	b := "0"
	if back {
		b = "1"
	}
	return base64.RawURLEncoding.EncodeToString([]byte("v1|" + strconv.FormatInt(d.CreatedAt.UnixMicro(), 10) + "|" + d.ID + "|" + b))
}

func parseCursor(c string) (*store.DeliveryCursor, bool, error) {
	bad := badInput("cursor: this page link is damaged; start again from the first page")
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return nil, false, bad
	}
	parts := strings.Split(string(raw), "|")
	if len(parts) != 4 || parts[0] != "v1" || (parts[3] != "0" && parts[3] != "1") || endpoint.ValidateID(parts[2]) != nil {
		return nil, false, bad
	}
	us, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return nil, false, bad
	}
	return &store.DeliveryCursor{CreatedAt: time.UnixMicro(us).UTC(), ID: parts[2]}, parts[3] == "1", nil
}

// logPage is the delivery log's data.
type logPage struct {
	Q            logQuery
	Rows         []store.Delivery
	Endpoints    []endpoint.Endpoint
	Newer, Older string
	Ranges       []string
}

func (h *Handler) deliveriesPage(w http.ResponseWriter, r *http.Request, s *session) error {
	q, p, err := h.parseLogQuery(r.Context(), s, r.URL.Query())
	if err != nil {
		return err
	}
	rows, more, err := h.store().DeliveryLog(r.Context(), p)
	if err != nil {
		return err
	}
	page := logPage{Q: q, Rows: rows, Ranges: []string{"1h", "24h", "7d", "30d"}}
	if len(rows) > 0 {
		forwardMore, backMore := more, p.After != nil
		if p.Back {
			forwardMore, backMore = true, more
		}
		if forwardMore {
			page.Older = pageLink(q, makeCursor(rows[len(rows)-1], false))
		}
		if backMore {
			page.Newer = pageLink(q, makeCursor(rows[0], true))
		}
	}
	if s.EndpointID == "" {
		if page.Endpoints, err = h.store().ListEndpoints(r.Context(), store.ListEndpointsParams{Account: s.Account, Limit: 200}); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, "deliveries", view{Title: "Delivery log", Nav: "deliveries", S: s, Data: page})
}

func pageLink(q logQuery, cursor string) string {
	v := q.values()
	v.Set("cursor", cursor)
	return "/portal/deliveries?" + v.Encode()
}

// deliveryView is the delivery detail page's data.
type deliveryView struct {
	D        store.Delivery
	Attempts []store.Attempt
	Ev       evidence
	Endpoint endpoint.Endpoint
	Gone     bool
	// SentSHA256 is the digest the attempt log recorded for the bytes
	// sent (the newest attempt that made a request): shown even when the
	// payload itself is no longer retained.
	SentSHA256 string
	// Retention and DLQRetention are how long the deliveries and
	// dead-letter topics keep records.
	Retention, DLQRetention time.Duration
}

// sentDigest is the newest recorded body digest of as.
func sentDigest(as []store.Attempt) string {
	for i := len(as) - 1; i >= 0; i-- {
		if as[i].BodySHA256 != "" {
			return as[i].BodySHA256
		}
	}
	return ""
}

func (h *Handler) deliveryPage(w http.ResponseWriter, r *http.Request, s *session) error {
	d, err := h.deliveryFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	as, err := h.store().AttemptsOfDelivery(r.Context(), d.Account, d.ID, 0)
	if err != nil {
		return err
	}
	v := deliveryView{D: d, Attempts: as, Ev: h.payload(r.Context(), d), SentSHA256: sentDigest(as),
		Retention: h.cfg.Topics.Retention, DLQRetention: h.cfg.Topics.DLQRetention}
	v.Endpoint, err = h.endpointFor(r.Context(), s, d.EndpointID)
	if errors.Is(err, errNotFound) {
		v.Gone, err = true, nil
	}
	if err != nil {
		return err
	}
	return h.render(w, r, http.StatusOK, "delivery", view{Title: "Delivery " + d.ID, Nav: "deliveries", S: s, Data: v})
}

// reasonOf reads the reason a replay asks for.
func reasonOf(r *http.Request) (string, error) {
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	switch {
	case reason == "":
		return "", badInput("reason: say why this is replayed (it is recorded in the replay audit)")
	case len([]rune(reason)) > replay.MaxReasonLen:
		return "", badInput("reason: at most %d characters", replay.MaxReasonLen)
	}
	return reason, nil
}

// deliveryReplay replays one dead letter: the same webhook-id, a fresh
// timestamp and signature, through the deliveries topic, audited.
func (h *Handler) deliveryReplay(w http.ResponseWriter, r *http.Request, s *session) error {
	d, err := h.deliveryFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	reason, err := reasonOf(r)
	if err != nil {
		return err
	}
	back := "/portal/deliveries/" + d.ID
	if d.Status != "dead" {
		return h.redirect(w, r, s, back, notice{Error: true, Text: "Only a dead-lettered delivery can be replayed; this one is " + d.Status + "."})
	}
	ev := h.deadLetter(r.Context(), d)
	if !ev.Available {
		return h.redirect(w, r, s, back, notice{Error: true, Text: "This dead letter cannot be replayed: " + ev.Why})
	}
	req, err := h.singleReplay(r.Context(), s, d, ev, reason)
	if err != nil {
		return h.redirect(w, r, s, back, notice{Error: true, Text: err.Error()})
	}
	return h.startReplay(w, r, s, req, back)
}

// singleReplay builds the replay request of exactly one dead letter: its
// endpoint, account and type, and the millisecond of its DLQ timestamp;
// it checks that nothing else matches. Its id is derived from the dead
// letter's position, so one dead letter is replayed once from the portal.
func (h *Handler) singleReplay(ctx context.Context, s *session, d store.Delivery, ev evidence, reason string) (replay.Request, error) {
	at := ev.record.Timestamp.Truncate(time.Millisecond)
	f := replay.Filter{EndpointID: d.EndpointID, Account: d.Account, Since: at, Until: at.Add(time.Millisecond)}
	if endpoint.ValidatePattern(d.EventType) == nil && !strings.Contains(d.EventType, "*") {
		f.EventType = d.EventType
	}
	be, _ := h.backend()
	others := 0
	_, err := replay.Scan(ctx, be.Replay, f, func(e replay.Entry) error {
		if e.DeliveryID != d.ID {
			others++
		}
		return nil
	})
	if err != nil {
		return replay.Request{}, fmt.Errorf("reading the dead letter: %w", err)
	}
	if others > 0 {
		return replay.Request{}, fmt.Errorf("%d other dead letters of this endpoint share this one's millisecond; "+
			"replay them together with the endpoint's recovery form instead", others)
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s|%s|%d|%d", d.ID, d.DLQTopic, *d.DLQPartition, *d.DLQOffset)))
	return replay.Request{Kind: replay.KindDLQ, ID: "rpl_dl_" + hex.EncodeToString(sum[:10]), Actor: s.Actor(),
		Reason: reason, Account: s.Account, Filter: f, Limit: 1}, nil
}

// startReplay prepares req (its audit row exists before anything is
// sent), runs it in the background, and answers with a notice.
func (h *Handler) startReplay(w http.ResponseWriter, r *http.Request, s *session, req replay.Request, back string) error {
	be, baseCtx := h.backend()
	p, err := replay.Prepare(r.Context(), be.Replay, req)
	switch {
	case errors.Is(err, replay.ErrEndpointDisabled):
		return h.redirect(w, r, s, back, notice{Error: true, Text: "The endpoint is disabled: enable it first, then replay. Nothing was replayed."})
	case errors.Is(err, replay.ErrRequestMismatch):
		prev, gerr := h.store().GetAccountReplay(r.Context(), req.Account, req.ID)
		text := "This was replayed before; see the replay audit."
		if gerr == nil {
			text = fmt.Sprintf("This dead letter was already replayed (%s) by %s on %s for %q. A dead letter is replayed once; if it fails again, its new dead letter can be replayed.",
				prev.ID, prev.Actor, formatTime(prev.CreatedAt), prev.Reason)
		}
		return h.redirect(w, r, s, back, notice{Error: true, Text: text, Link: "/portal/replays", LinkText: "Replay audit"})
	case errors.Is(err, replay.ErrInvalid), errors.Is(err, replay.ErrEndpointNotFound):
		return badInput("%v", err)
	case err != nil:
		return err
	}
	row := p.Row()
	if row.Status == store.ReplayDone {
		return h.redirect(w, r, s, back, notice{Text: fmt.Sprintf("This request ran already (%s, %d replayed); nothing was sent again.", row.ID, row.Replayed),
			Link: "/portal/replays", LinkText: "Replay audit"})
	}
	h.runs.Go(func() {
		res, err := p.Run(baseCtx)
		if err != nil {
			h.logger.WarnContext(baseCtx, "portal replay stopped", "replay_id", row.ID, "status", res.Status, "error", err)
			return
		}
		h.logger.InfoContext(baseCtx, "portal replay finished", "replay_id", row.ID, "replayed", res.Replayed, "skipped", res.Skipped)
	})
	h.audit(r.Context(), s, "replay", row.ID, req.Reason)
	return h.redirect(w, r, s, back, notice{Text: "Replay " + row.ID + " started: each dead letter goes out again with the same webhook-id as before, a fresh timestamp and signature.",
		Link: "/portal/replays", LinkText: "Follow it in the replay audit"})
}

// deliveryResend sends one delivery again, whatever its state: the same
// webhook-id and body, a fresh timestamp and signature, through the
// deliveries topic, audited as a replay of kind delivery.
func (h *Handler) deliveryResend(w http.ResponseWriter, r *http.Request, s *session) error {
	d, err := h.deliveryFor(r.Context(), s, r.PathValue("id"))
	if err != nil {
		return err
	}
	reason, err := reasonOf(r)
	if err != nil {
		return err
	}
	back := "/portal/deliveries/" + d.ID
	// A resend holds one of the account's replay slots while it runs (a
	// Kafka read and write), shared with the API's resends and replays.
	if !h.slots.AcquireReplay(s.Account) {
		return h.redirect(w, r, s, back, notice{Error: true, Text: "Too many replays and resends are running for this account " +
			"right now. Nothing was sent; try again in a few seconds.", Link: "/portal/replays", LinkText: "Replay audit"})
	}
	defer h.slots.ReleaseReplay(s.Account)
	be, _ := h.backend()
	row, err := replay.ResendDelivery(r.Context(), be.Replay, replay.DeliveryResend{Account: s.Account, DeliveryID: d.ID,
		Actor: s.Actor(), Reason: reason, PayloadTimeout: h.cfg.PayloadTimeout})
	switch {
	case errors.Is(err, replay.ErrEndpointDisabled):
		return h.redirect(w, r, s, back, notice{Error: true, Text: "The endpoint is disabled: enable it first, then resend. Nothing was sent."})
	case errors.Is(err, replay.ErrEndpointNotFound):
		return h.redirect(w, r, s, back, notice{Error: true, Text: "The endpoint was deleted: there is nowhere to resend this delivery."})
	case errors.Is(err, replay.ErrPayloadExpired), errors.Is(err, replay.ErrPayloadUnknown),
		errors.Is(err, replay.ErrPayloadMismatch), errors.Is(err, replay.ErrPayloadUnavailable):
		return h.redirect(w, r, s, back, notice{Error: true, Text: "Nothing was sent. " + h.payloadWhy(r.Context(), d, err)})
	case errors.Is(err, replay.ErrInvalid):
		return badInput("%v", err)
	case err != nil && row.ID == "":
		return err
	case err != nil:
		return h.redirect(w, r, s, back, notice{Error: true, Text: "Resend " + row.ID + " failed: " + row.Error,
			Link: "/portal/replays", LinkText: "Replay audit"})
	}
	h.audit(r.Context(), s, "resend", row.ID, reason)
	return h.redirect(w, r, s, back, notice{Text: "Resent (" + row.ID + "): the same webhook-id " + d.EventID +
		" as before, a fresh timestamp and signature. Its attempts appear below as they are made.",
		Link: "/portal/replays", LinkText: "Replay audit"})
}
