package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/delivery"
)

// DeadLetter is one record read from the dead-letter topic.
type DeadLetter struct {
	EndpointID  string
	EventID     string
	Reason      string
	ErrorClass  string
	OriginTopic string
	Attempts    int
	Value       string
	// ReadErr is set when the provenance headers do not parse.
	ReadErr string
}

// DLQTail reads the dead-letter topic from its start, continuously.
type DLQTail struct {
	cl   *kgo.Client
	mu   sync.Mutex
	recs []DeadLetter
	done chan struct{}
}

// TailDLQ starts reading topic on the broker at addr until ctx ends.
func TailDLQ(ctx context.Context, addr, topic string) (*DLQTail, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200e6),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())) // the router dead-letters in transactions
	if err != nil {
		return nil, err
	}
	t := &DLQTail{cl: cl, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				dl := DeadLetter{EndpointID: string(r.Key), Value: string(r.Value)}
				for _, h := range r.Headers {
					if h.Key == delivery.HeaderEventID {
						dl.EventID = string(h.Value)
					}
				}
				p, err := deadletter.Read(r)
				if err != nil {
					dl.ReadErr = err.Error()
				}
				dl.Reason, dl.ErrorClass, dl.OriginTopic, dl.Attempts = p.Reason, p.ErrorClass, p.OriginTopic, p.Attempts
				t.mu.Lock()
				t.recs = append(t.recs, dl)
				t.mu.Unlock()
			})
		}
	}()
	return t, nil
}

// Records returns what was read so far.
func (t *DLQTail) Records() []DeadLetter {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]DeadLetter(nil), t.recs...)
}

// Wait waits for the reader to stop (after its ctx ended).
func (t *DLQTail) Wait() { <-t.done }

// CheckInput is what the checker compares.
type CheckInput struct {
	Ledger    *Ledger
	Receivers []*Receiver
	// Subscriptions maps an account to the endpoints subscribed to its
	// events (every event type) at fan-out time.
	Subscriptions map[string][]string
	// Class names each endpoint's behaviour, for the per-class table.
	Class map[string]string
	DLQ   *DLQTail
	// Pool reads webhooks.attempts; nil skips the attempt-log comparison.
	Pool *pgxpool.Pool
}

// ClassReport is the outcome for the endpoints of one behaviour.
type ClassReport struct {
	Endpoints int
	// Expected deliveries: committed events times subscribed endpoints.
	Expected int
	// Delivered: pairs the receiver answered 2xx at least once.
	Delivered int
	// Dead: pairs on the dead-letter topic (and never answered 2xx).
	Dead int
	// DeliveredAndDead: answered 2xx and yet dead-lettered (the sender
	// never saw the answer, e.g. a timeout while the body was slow).
	DeliveredAndDead int
	Lost             int
	// Duplicates: 2xx answers beyond the first of a pair.
	Duplicates int
	Requests   int
	DLQReasons map[string]int
}

// Report is the checker's verdict.
type Report struct {
	Committed, RolledBack, Uncertain int
	Expected, Delivered, Dead, Lost  int
	DeliveredAndDead                 int
	Duplicates                       int
	Requests                         int
	// RolledBackDelivered: requests carrying the id of a rolled-back event.
	RolledBackDelivered int
	// Unknown: requests whose (endpoint, webhook-id) was never expected.
	Unknown       int
	BadSignatures int
	TrapHits      int64
	// DLQ: records on the dead-letter topic, by reason; DLQNoReason counts
	// those without a readable reason header.
	DLQ         int
	DLQReasons  map[string]int
	DLQNoReason int
	// InvalidProduced / InvalidDead: invalid envelopes acknowledged by the
	// broker and found dead-lettered as invalid_envelope.
	InvalidProduced, InvalidDead int
	// Attempt log versus receiver log.
	AttemptRows int
	// LoggedNotReceived: delivered in the attempt log, never answered 2xx
	// by the receiver. Must be 0.
	LoggedNotReceived int
	// ReceivedNotLogged: answered 2xx, not dead-lettered, and no delivered
	// row in the attempt log.
	ReceivedNotLogged int
	// RequestRows: attempt rows that stand for a request (every row but
	// those of attempts that never reached a receiver: circuit open,
	// connect failures, ...; see noRequestClasses).
	RequestRows int
	// RequestsSent: requests the receivers got for expected deliveries.
	RequestsSent int
	// UnknownRows: attempt rows with outcome unknown, which a dispatcher's
	// successor writes for a request its predecessor announced (an intent
	// record) and died during. Whether the request reached the receiver
	// nobody can know: the process may have died between the intent's
	// acknowledgement and writing the request. So each stands for a
	// request sent or not, and RequestRows <= requests <= RequestRows +
	// UnknownRows.
	UnknownRows int
	// RequestsNotLogged: requests the receivers got (for expected
	// deliveries) beyond RequestRows + UnknownRows. Must be 0: every
	// request leaves an attempt row (issue 33), also one whose dispatcher
	// died with it. RowsWithoutRequest: RequestRows beyond the requests
	// the receivers got. Must be 0.
	RequestsNotLogged, RowsWithoutRequest int
	Classes                               map[string]*ClassReport
	LostSample                            []string
	Problems                              []string
}

// OK reports whether the invariants hold: nothing lost, nothing rolled back
// delivered, every dead letter with a reason, every signature valid, no
// redirect followed, no unexpected request, and (when compared) the
// attempt log agrees with the receivers.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Check compares everything it is given.
func Check(ctx context.Context, in CheckInput) (*Report, error) {
	c := &checker{in: in, events: in.Ledger.Snapshot(), ok2xx: map[pair]int{}, requests: map[pair]int{},
		dead: map[pair][]DeadLetter{}, expected: map[pair]bool{},
		rep: &Report{DLQReasons: map[string]int{}, Classes: map[string]*ClassReport{}}}
	for _, eps := range in.Subscriptions {
		for _, ep := range eps {
			c.class(ep).Endpoints++
		}
	}
	c.tallyRequests()
	c.tallyDLQ()
	c.tallyEvents()
	c.tallyUnknown()
	if in.Pool != nil {
		if err := c.compareAttemptLog(ctx); err != nil {
			return c.rep, err
		}
	}
	c.rep.problems(in.Pool != nil)
	return c.rep, nil
}

// pair is one (endpoint, event): one expected delivery.
type pair struct{ ep, id string }

// checker holds what Check reads, indexed by (endpoint, event).
type checker struct {
	in       CheckInput
	rep      *Report
	events   map[string]EventInfo
	ok2xx    map[pair]int          // 2xx answers received
	requests map[pair]int          // requests received, any answer
	dead     map[pair][]DeadLetter // dead letters
	expected map[pair]bool         // committed (or uncertain) deliveries
}

// class returns the report of the endpoint's class ("default" if none).
func (c *checker) class(ep string) *ClassReport {
	name := c.in.Class[ep]
	if name == "" {
		name = "default"
	}
	cr := c.rep.Classes[name]
	if cr == nil {
		cr = &ClassReport{DLQReasons: map[string]int{}}
		c.rep.Classes[name] = cr
	}
	return cr
}

// tallyRequests counts what the receivers saw.
func (c *checker) tallyRequests() {
	for _, rc := range c.in.Receivers {
		c.rep.TrapHits += rc.TrapHits()
		for _, q := range rc.Requests() {
			p := pair{q.EndpointID, q.WebhookID}
			c.requests[p]++
			c.rep.Requests++
			c.class(q.EndpointID).Requests++
			if !q.SigOK {
				c.rep.BadSignatures++
			}
			if q.Status >= 200 && q.Status < 300 {
				c.ok2xx[p]++
			}
		}
	}
}

// tallyDLQ counts the dead letters, by reason, and the invalid envelopes
// that were expected to end there.
func (c *checker) tallyDLQ() {
	invalid := c.in.Ledger.Invalid()
	c.rep.InvalidProduced = len(invalid)
	if c.in.DLQ == nil {
		return
	}
	for _, d := range c.in.DLQ.Records() {
		c.rep.DLQ++
		if d.Reason == "" || d.ReadErr != "" {
			c.rep.DLQNoReason++
		}
		c.rep.DLQReasons[d.Reason]++
		if d.Reason == deadletter.ReasonInvalidEnvelope {
			if invalid[d.Value] {
				c.rep.InvalidDead++
			}
			continue
		}
		p := pair{d.EndpointID, d.EventID}
		c.dead[p] = append(c.dead[p], d)
	}
}

// tallyEvents classifies every expected delivery of every ledger event:
// delivered (and how often), dead-lettered, or lost.
func (c *checker) tallyEvents() {
	for id, e := range c.events {
		switch e.State {
		case StateCommitted:
			c.rep.Committed++
		case StateRolledBack:
			c.rep.RolledBack++
		default:
			c.rep.Uncertain++
		}
		for _, ep := range c.in.Subscriptions[e.Account] {
			p := pair{ep, id}
			if e.State == StateRolledBack {
				if c.requests[p] > 0 {
					c.rep.RolledBackDelivered++
				}
				continue
			}
			c.expected[p] = true
			if e.State != StateCommitted && c.ok2xx[p] == 0 && len(c.dead[p]) == 0 {
				continue // uncertain and never seen: not lost, not counted
			}
			c.classify(p)
		}
	}
}

func (c *checker) classify(p pair) {
	rep, cr := c.rep, c.class(p.ep)
	rep.Expected++
	cr.Expected++
	switch {
	case c.ok2xx[p] > 0:
		rep.Delivered++
		cr.Delivered++
		rep.Duplicates += c.ok2xx[p] - 1
		cr.Duplicates += c.ok2xx[p] - 1
		if len(c.dead[p]) > 0 {
			rep.DeliveredAndDead++
			cr.DeliveredAndDead++
		}
	case len(c.dead[p]) > 0:
		rep.Dead++
		cr.Dead++
		cr.DLQReasons[c.dead[p][0].Reason]++
	default:
		rep.Lost++
		cr.Lost++
		if len(rep.LostSample) < 10 {
			rep.LostSample = append(rep.LostSample, p.ep+"/"+p.id)
		}
	}
}

// tallyUnknown counts requests for deliveries nobody asked for.
func (c *checker) tallyUnknown() {
	for p, n := range c.requests {
		if c.expected[p] {
			continue
		}
		if e, ok := c.events[p.id]; !ok || e.State != StateRolledBack {
			c.rep.Unknown += n
		}
	}
}

// compareAttemptLog checks the Postgres attempt log against what the
// receivers saw.
func (c *checker) compareAttemptLog(ctx context.Context) error {
	logged, requestedRows, err := c.readAttemptLog(ctx)
	if err != nil {
		return fmt.Errorf("reading the attempt log: %w", err)
	}
	for p := range logged {
		if c.ok2xx[p] == 0 && c.expected[p] {
			c.rep.LoggedNotReceived++
		}
	}
	for p := range c.ok2xx {
		if !logged[p] && len(c.dead[p]) == 0 && c.expected[p] {
			c.rep.ReceivedNotLogged++
		}
	}
	sent := 0
	for p, n := range c.requests {
		if c.expected[p] {
			sent += n
		}
	}
	c.rep.RequestRows = requestedRows
	c.rep.RequestsNotLogged = max(0, sent-requestedRows-c.rep.UnknownRows)
	c.rep.RowsWithoutRequest = max(0, requestedRows-sent)
	c.rep.RequestsSent = sent
	return nil
}

// readAttemptLog returns the expected deliveries the log says were
// delivered, and how many of its rows stand for a request that was made.
func (c *checker) readAttemptLog(ctx context.Context) (map[pair]bool, int, error) {
	rows, err := c.in.Pool.Query(ctx, `SELECT event_id, endpoint_id, outcome,
			status_code IS NOT NULL OR coalesce(error_class, '') <> ALL($1::text[]) AS requested, count(*)
		FROM webhooks.attempts GROUP BY 1, 2, 3, 4`, noRequestClasses)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	logged := map[pair]bool{}
	requestedRows := 0
	for rows.Next() {
		var ev, ep, outcome string
		var requested bool
		var n int
		if err := rows.Scan(&ev, &ep, &outcome, &requested, &n); err != nil {
			return nil, 0, err
		}
		if !c.expected[pair{ep, ev}] {
			continue // warm-up probes and the like
		}
		c.rep.AttemptRows += n
		if outcome == "unknown" {
			c.rep.UnknownRows += n
		} else if requested {
			requestedRows += n
		}
		if outcome == "delivered" {
			logged[pair{ep, ev}] = true
		}
	}
	return logged, requestedRows, rows.Err()
}

func (r *Report) problems(attemptLog bool) {
	add := func(cond bool, format string, args ...any) {
		if cond {
			r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
		}
	}
	add(r.Lost > 0, "%d deliveries lost (e.g. %s)", r.Lost, strings.Join(r.LostSample, ", "))
	add(r.RolledBackDelivered > 0, "%d requests for rolled-back events", r.RolledBackDelivered)
	add(r.DLQNoReason > 0, "%d dead letters without a reason", r.DLQNoReason)
	add(r.BadSignatures > 0, "%d requests with a bad signature", r.BadSignatures)
	add(r.Unknown > 0, "%d requests for deliveries never expected", r.Unknown)
	add(r.TrapHits > 0, "%d redirects followed", r.TrapHits)
	add(r.InvalidDead < r.InvalidProduced, "%d of %d invalid envelopes not dead-lettered", r.InvalidProduced-r.InvalidDead, r.InvalidProduced)
	if attemptLog {
		add(r.LoggedNotReceived > 0, "%d deliveries logged as delivered the receiver never answered 2xx", r.LoggedNotReceived)
		add(r.ReceivedNotLogged > 0, "%d deliveries answered 2xx with no delivered row in the attempt log", r.ReceivedNotLogged)
		add(r.RequestsNotLogged != 0 || r.RowsWithoutRequest != 0,
			"requests sent (receivers) %d outside [attempt rows that made a request, the same plus unknown-outcome rows] (Postgres) = [%d, %d]",
			r.RequestsSent, r.RequestRows, r.RequestRows+r.UnknownRows)
	}
}

// Settled reports whether nothing is pending any more: every expected pair
// delivered or dead-lettered, every invalid envelope dead-lettered, and the
// attempt log caught up.
func (r *Report) Settled() bool {
	return r.Lost == 0 && r.InvalidDead >= r.InvalidProduced && r.ReceivedNotLogged == 0
}

// String renders the report as Markdown.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "| events committed | rolled back | uncertain | expected deliveries | delivered | dead-lettered | lost | duplicates | rolled-back delivered | requests | attempt rows | DLQ |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d | %d |\n\n",
		r.Committed, r.RolledBack, r.Uncertain, r.Expected, r.Delivered, r.Dead, r.Lost, r.Duplicates,
		r.RolledBackDelivered, r.Requests, r.AttemptRows, r.DLQ)
	fmt.Fprintf(&b, "| endpoint class | endpoints | expected | delivered | dead-lettered (reasons) | delivered and dead | lost | duplicates | requests |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	names := make([]string, 0, len(r.Classes))
	for n := range r.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := r.Classes[n]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d %s | %d | %d | %d | %d |\n", n, c.Endpoints, c.Expected, c.Delivered, c.Dead,
			fmtReasons(c.DLQReasons), c.DeliveredAndDead, c.Lost, c.Duplicates, c.Requests)
	}
	fmt.Fprintf(&b, "\nDLQ reasons: %s; invalid envelopes dead-lettered %d/%d; bad signatures %d; redirects followed %d; unknown requests %d\n",
		fmtReasons(r.DLQReasons), r.InvalidDead, r.InvalidProduced, r.BadSignatures, r.TrapHits, r.Unknown)
	fmt.Fprintf(&b, "attempt log vs receivers: delivered-but-not-received %d, received-but-not-logged %d; requests sent %d, attempt rows that made a request %d, unknown-outcome rows %d (all rows %d)\n",
		r.LoggedNotReceived, r.ReceivedNotLogged, r.RequestsSent, r.RequestRows, r.UnknownRows, r.AttemptRows)
	if len(r.Problems) > 0 {
		fmt.Fprintf(&b, "PROBLEMS:\n- %s\n", strings.Join(r.Problems, "\n- "))
	}
	return b.String()
}

func fmtReasons(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return "(" + strings.Join(parts, " ") + ")"
}
