package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"sort"
	"strings"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/store"
)

// DLQCmd groups the dead-letter commands.
type DLQCmd struct {
	List    DLQListCmd    `cmd:"" help:"List dead letters matching filters, oldest first (streams the DLQ topic)."`
	Replay  DLQReplayCmd  `cmd:"" help:"Send matching dead letters again (same webhook-id, fresh attempts); resumable, audited; skips those delivered since."`
	Replays DLQReplaysCmd `cmd:"" help:"Show the replay audit log (one row per replay request)."`
}

// DLQFilter are the dead-letter filters shared by list and replay, so a
// list command's filters can be copied into a replay command as they are.
// (--reason is never a filter: in every command it is the audit text.)
type DLQFilter struct {
	DLQReason string `name:"dlq-reason" help:"Only dead letters with this dead-letter reason (retries_exhausted, endpoint_gone, client_error, endpoint_disabled, ...)."`
	Endpoint  string `name:"endpoint" help:"Only this endpoint's dead letters (reads only its partition)."`
	Account   string `name:"account" help:"Only this account's dead letters."`
	Type      string `name:"type" help:"Only this event type; '*' wildcards (invoice.*)."`
	Since     string `name:"since" help:"Dead-lettered at or after this time: RFC 3339 or a duration ago (24h, 7d)."`
	Until     string `name:"until" help:"Dead-lettered before this time: RFC 3339 or a duration ago."`
}

func (f DLQFilter) filter(now time.Time) (replay.Filter, error) {
	since, err := replay.ParseTime(f.Since, now)
	if err != nil {
		return replay.Filter{}, Usage(fmt.Errorf("--since: %w", err))
	}
	until, err := replay.ParseTime(f.Until, now)
	if err != nil {
		return replay.Filter{}, Usage(fmt.Errorf("--until: %w", err))
	}
	out := replay.Filter{EndpointID: f.Endpoint, Account: f.Account, EventType: f.Type, Reason: f.DLQReason, Since: since, Until: until}
	if err := out.Validate(); err != nil {
		return out, Usage(err)
	}
	return out, nil
}

// replayDeps opens Postgres (when withStore) and checks Kafka.
func replayDeps(ctx context.Context, g *Globals, withStore bool) (replay.Deps, func(), error) {
	cfg, err := g.TopicsConfig()
	if err != nil {
		return replay.Deps{}, nil, err
	}
	cl, err := g.Kafka(ctx) // checks the brokers answer
	if err != nil {
		return replay.Deps{}, nil, err
	}
	cl.Close()
	kc, err := g.KafkaConfig(kafkaconn.Config{Brokers: g.Brokers, ClientID: "hookctl"})
	if err != nil {
		return replay.Deps{}, nil, Usage(err)
	}
	deps := replay.Deps{KafkaOpts: kafkaconn.Opts(kc, g.logger), Names: topics.NamesFor(cfg), Logger: g.logger}
	if !withStore {
		return deps, func() {}, nil
	}
	st, err := g.Store(ctx)
	if err != nil {
		return deps, nil, err
	}
	deps.Store = st
	return deps, st.Close, nil
}

// DLQListCmd lists dead letters in dead-letter time order, like a log:
// the DLQ's partitions are merged by record timestamp as they are read
// (replay.ScanByTime), so --limit N prints the N oldest matching without
// buffering the rest.
type DLQListCmd struct {
	DLQFilter
	Limit int `name:"limit" default:"1000" help:"Stop after this many, the oldest (0: all). Dead letters print oldest first: partitions merged by dead-letter time."`
}

// Run implements `hookctl dlq list`.
func (c *DLQListCmd) Run(ctx context.Context, g *Globals) error {
	if c.Limit < 0 {
		return Usage(fmt.Errorf("--limit: must not be negative, got %d", c.Limit))
	}
	f, err := c.filter(time.Now())
	if err != nil {
		return err
	}
	deps, done, err := replayDeps(ctx, g, false)
	if err != nil {
		return err
	}
	defer done()
	w := newEntryWriter(g, false)
	n := 0
	st, err := replay.ScanByTime(ctx, deps, f, func(e replay.Entry) error {
		if c.Limit > 0 && n >= c.Limit {
			return errLimit
		}
		n++
		return w.write(e, "")
	})
	if err != nil && !errors.Is(err, errLimit) {
		return replayError(err)
	}
	if err := w.close(); err != nil {
		return err
	}
	if !g.JSON() {
		more := ""
		if errors.Is(err, errLimit) {
			more = fmt.Sprintf(" (stopped at --limit %d)", c.Limit)
		}
		fmt.Fprintf(g.Out(), "%d dead letter(s)%s, %d scanned\n", n, more, st.Scanned)
	}
	return nil
}

var errLimit = errors.New("limit reached")

// entryWriter streams dead letters as a table (flushed every 100 rows) or
// a JSON array, never holding them all.
type entryWriter struct {
	g      *Globals
	action bool
	n      int
	tw     interface {
		Flush() error
		Write([]byte) (int, error)
	}
}

func newEntryWriter(g *Globals, action bool) *entryWriter {
	return &entryWriter{g: g, action: action}
}

func (w *entryWriter) write(e replay.Entry, action string) error {
	if w.g.JSON() {
		sep := ",\n"
		if w.n == 0 {
			sep = "[\n"
		}
		w.n++
		var v any = e
		if w.action {
			v = struct {
				replay.Entry
				Action string `json:"action"`
			}{e, action}
		}
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w.g.Out(), "%s  %s", sep, b)
		return err
	}
	if w.tw == nil {
		w.tw = w.g.Table()
		head := "DEAD AT\tPART/OFFSET\tENDPOINT\tACCOUNT\tEVENT ID\tTYPE\tREASON\tATTEMPTS\tLAST STATUS"
		if w.action {
			head += "\tACTION"
		}
		fmt.Fprintln(w.tw, head)
	}
	w.n++
	line := fmt.Sprintf("%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s", fmtTime(e.DeadAt), e.Partition, e.Offset, dash(e.EndpointID),
		dash(e.Account), dash(e.EventID), dash(e.EventType), e.Reason, e.Attempts, codeText(e.LastStatus))
	if w.action {
		line += "\t" + action
	}
	fmt.Fprintln(w.tw, line)
	if w.n%100 == 0 {
		return w.tw.Flush()
	}
	return nil
}

func (w *entryWriter) close() error {
	if w.g.JSON() {
		if w.n == 0 {
			_, err := fmt.Fprintln(w.g.Out(), "[]")
			return err
		}
		_, err := fmt.Fprintln(w.g.Out(), "\n]")
		return err
	}
	if w.tw != nil {
		return w.tw.Flush()
	}
	return nil
}

// ReplayFlags are the flags shared by dlq replay and endpoints resend.
type ReplayFlags struct {
	Actor  string  `name:"actor" env:"HOOKD_ACTOR" help:"Who replays, for the audit log. Defaults to the OS user."`
	DryRun bool    `name:"dry-run" help:"Print what would be replayed and the count; send nothing."`
	Rate   float64 `name:"rate" default:"0" help:"At most this many records per second (0: no limit)."`
	Limit  int64   `name:"limit" default:"0" help:"Replay at most this many dead letters (0: all)."`
	Force  bool    `name:"force" help:"Replay to disabled endpoints too."`
	// IncludeResolved is part of the request (and of its derived id).
	IncludeResolved bool   `name:"include-resolved" help:"Replay resolved dead letters too: those whose delivery was delivered since, or sent again since by a replay or resend. By default they are skipped as already delivered."`
	ReplayID        string `name:"replay-id" help:"Name the request (to resume it by id); by default the id is derived from actor, reason, filters, limit and --include-resolved, so re-running the same command resumes it."`
}

func (f ReplayFlags) actor() string {
	if f.Actor != "" {
		return f.Actor
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "unknown"
}

// DLQReplayCmd replays dead letters.
type DLQReplayCmd struct {
	DLQFilter
	Reason string `name:"reason" required:"" help:"Why you replay (recorded in the audit log; part of the request id)."`
	ReplayFlags
}

// Run implements `hookctl dlq replay`.
func (c *DLQReplayCmd) Run(ctx context.Context, g *Globals) error {
	f, err := c.filter(time.Now())
	if err != nil {
		return err
	}
	req := replay.Request{Kind: replay.KindDLQ, ID: c.ReplayID, Actor: c.actor(), Reason: c.Reason, Filter: f,
		SinceSpec: c.Since, UntilSpec: c.Until}
	return runReplay(ctx, g, req, c.ReplayFlags)
}

// runReplay carries out a replay request for the command line: streams the
// dry run, shows a progress line on a terminal, prints the outcome.
func runReplay(ctx context.Context, g *Globals, req replay.Request, flags ReplayFlags) error {
	req.Limit, req.Force, req.DryRun, req.Rate = flags.Limit, flags.Force, flags.DryRun, flags.Rate
	req.IncludeResolved = flags.IncludeResolved
	if req.Limit < 0 || req.Rate < 0 {
		return Usage(errors.New("--limit and --rate must not be negative"))
	}
	deps, done, err := replayDeps(ctx, g, true)
	if err != nil {
		return err
	}
	defer done()
	var (
		w   *entryWriter
		bar *progressLine
	)
	if req.DryRun {
		w = newEntryWriter(g, true)
		req.OnEntry = func(e replay.Entry, action string) { _ = w.write(e, action) }
	} else if isTerminal(os.Stderr) {
		bar = newProgressLine(os.Stderr)
		req.OnProgress = bar.update
	}
	res, err := replay.Run(ctx, deps, req)
	bar.done() // before the summary, so it starts on a line of its own
	if w != nil {
		if cerr := w.close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if err != nil {
		if res.ID != "" && (res.Status == store.ReplayInterrupted || res.Status == store.ReplayFailed) {
			return fmt.Errorf("replay %s %s after %d replayed: %w; run the same command again (or add --replay-id %s) to resume without repeats",
				res.ID, res.Status, res.Replayed, err, res.ID)
		}
		return replayError(err)
	}
	return printReplayResult(g, req, res)
}

// printReplayResult prints a replay's outcome: its counts, then why what
// was skipped was.
func printReplayResult(g *Globals, req replay.Request, res replay.Result) error {
	if g.JSON() {
		if req.DryRun {
			return nil // the JSON array of entries is the output
		}
		return g.PrintJSON(res)
	}
	switch {
	case req.DryRun:
		fmt.Fprintf(g.Out(), "dry run: would replay %d of %d matching dead letter(s); %d would be skipped\n", res.Replayed, res.Matched, res.Skipped)
	case res.AlreadyDone:
		fmt.Fprintf(g.Out(), "replay %s already completed at %s (%d replayed, %d skipped): nothing sent again. Use another --reason or --replay-id for a new replay.\n",
			res.ID, fmtTimePtr(res.FinishedAt), res.Replayed, res.Skipped)
	default:
		fmt.Fprintf(g.Out(), "replay %s %s: %d replayed, %d skipped, %d matched (actor %s)\n", res.ID, res.Status, res.Replayed, res.Skipped, res.Matched, res.Actor)
	}
	if len(res.SkippedEndpoints) > 0 {
		ids := make([]string, 0, len(res.SkippedEndpoints))
		for id := range res.SkippedEndpoints {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			fmt.Fprintf(g.Out(), "  skipped endpoint %s: %s\n", id, res.SkippedEndpoints[id])
		}
	}
	if n := res.Skips[replay.SkipAlreadyDelivered]; n > 0 {
		fmt.Fprintf(g.Out(), "  skipped %d dead letter(s) already delivered since they died (by an earlier replay or resend); --include-resolved sends them again\n", n)
	}
	return nil
}

// replayError maps the replay package's refusals to exit 2.
func replayError(err error) error {
	for _, target := range []error{replay.ErrInvalid, replay.ErrEndpointDisabled, replay.ErrEndpointNotFound,
		replay.ErrRequestMismatch, store.ErrReplayBusy} {
		if errors.Is(err, target) {
			return Usage(err)
		}
	}
	return err
}

// DLQReplaysCmd shows the replay audit log.
type DLQReplaysCmd struct {
	ID    string `arg:"" optional:"" help:"One replay id: show it in full."`
	Limit int    `name:"limit" default:"50" help:"At most this many rows."`
}

// Run implements `hookctl dlq replays`.
func (c *DLQReplaysCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	if c.ID != "" {
		r, err := st.GetReplay(ctx, c.ID)
		if err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return Usage(err)
			}
			return err
		}
		return g.PrintJSON(r)
	}
	rs, err := st.ListReplays(ctx, store.ListReplaysParams{Limit: c.Limit})
	if err != nil {
		return err
	}
	if g.JSON() {
		return g.PrintJSON(rs)
	}
	tw := g.Table()
	fmt.Fprintln(tw, "CREATED\tID\tKIND\tACTOR\tSTATUS\tMATCHED\tREPLAYED\tSKIPPED\tREASON\tFILTER")
	for _, r := range rs {
		status := r.Status
		if r.DryRun {
			status += " (dry run)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", fmtTime(r.CreatedAt), r.ID, r.Kind, r.Actor, status,
			r.Matched, r.Replayed, r.Skipped, clip(r.Reason, 40), clip(filterText(r.Filter), 80))
	}
	return tw.Flush()
}

func filterText(raw json.RawMessage) string {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return string(raw)
	}
	delete(m, "request_hash")
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	return strings.Join(parts, " ")
}
