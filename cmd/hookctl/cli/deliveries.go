package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookd/hookd/deadletter/replay"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/store"
)

// DeliveriesCmd groups the delivery-log commands.
type DeliveriesCmd struct {
	List DeliveriesListCmd `cmd:"" help:"List an endpoint's (or an account's) deliveries, newest first."`
	Show DeliveriesShowCmd `cmd:"" help:"Show a delivery (or every delivery of an event) with its attempt timeline."`
	// Payload lives in payload.go.
	Payload DeliveriesPayloadCmd `cmd:"" help:"Print a delivery's payload (the exact body sent), read from Kafka while retention keeps it; -o json adds where it was read (topic, partition, offset, sha256)."`
	// Resend lives in resend.go.
	Resend DeliveriesResendCmd `cmd:"" help:"Send one delivery again, whatever its state: same webhook-id, a fresh timestamp and signature; audited."`
}

// DeliveriesListCmd lists deliveries.
type DeliveriesListCmd struct {
	Endpoint string `name:"endpoint" help:"Endpoint id (this or --account is required)."`
	Account  string `name:"account" help:"Account (this or --endpoint is required)."`
	Status   string `name:"status" enum:",pending,retrying,delivered,dead" default:"" help:"Only deliveries in this state: pending, retrying, delivered or dead."`
	Before   string `name:"before" help:"Only deliveries created before this time (RFC 3339 or a duration ago: 24h), to page back."`
	Limit    int    `name:"limit" default:"50" help:"At most this many deliveries (max 1000)."`
}

// Run implements `hookctl deliveries list`.
func (c *DeliveriesListCmd) Run(ctx context.Context, g *Globals) error {
	if c.Endpoint == "" && c.Account == "" {
		return Usage(errors.New("--endpoint or --account is required"))
	}
	if c.Limit < 1 || c.Limit > 1000 {
		return Usage(fmt.Errorf("--limit: must be 1..1000, got %d", c.Limit))
	}
	before, err := replay.ParseTime(c.Before, time.Now())
	if err != nil {
		return Usage(fmt.Errorf("--before: %w", err))
	}
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	ds, err := st.ListDeliveries(ctx, store.ListDeliveriesParams{EndpointID: c.Endpoint, Account: c.Account,
		Status: c.Status, Before: before, Limit: c.Limit})
	if err != nil {
		return err
	}
	if g.JSON() {
		return g.PrintJSON(ds)
	}
	tw := g.Table()
	fmt.Fprintln(tw, "CREATED\tEVENT ID\tTYPE\tENDPOINT\tSTATUS\tATTEMPTS\tLAST STATUS\tNEXT DUE\tLAST ERROR")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", fmtTime(d.CreatedAt), d.EventID, d.EventType, d.EndpointID,
			statusText(d), d.Attempts, codeText(d.LastStatusCode), fmtTimePtr(d.NextDueAt), clip(d.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(ds) == c.Limit {
		fmt.Fprintf(g.Out(), "(more: --before %s)\n", ds[len(ds)-1].CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// DeliveriesShowCmd shows deliveries with their attempts.
type DeliveriesShowCmd struct {
	ID string `arg:"" help:"Delivery id (dlv_...) or event id (the webhook-id): an event shows each endpoint's delivery."`
}

type deliveryTimeline struct {
	store.Delivery
	Timeline []store.Attempt `json:"attempts_log"`
}

// Run implements `hookctl deliveries show`.
func (c *DeliveriesShowCmd) Run(ctx context.Context, g *Globals) error {
	st, err := g.Store(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	out, err := timelines(ctx, st, c.ID)
	if err != nil {
		return err
	}
	if g.JSON() {
		return g.PrintJSON(out)
	}
	for i, d := range out {
		if i > 0 {
			fmt.Fprintln(g.Out())
		}
		if err := printTimeline(g, d); err != nil {
			return err
		}
	}
	return nil
}

// timelines finds id as a delivery id, then as an event id.
func timelines(ctx context.Context, st *store.Store, id string) ([]deliveryTimeline, error) {
	var ds []store.Delivery
	// An operator's read: every account's rows; each timeline shows only
	// the attempts of its delivery's account.
	d, err := st.GetDelivery(ctx, store.AnyAccount, id)
	switch {
	case err == nil:
		ds = []store.Delivery{d}
	case errors.Is(err, store.ErrNotFound):
		if ds, err = st.DeliveriesOfEvent(ctx, store.AnyAccount, id); err != nil {
			return nil, err
		}
		if len(ds) == 0 {
			return nil, Usage(fmt.Errorf("no delivery or event %s in the delivery log", id))
		}
	default:
		return nil, err
	}
	out := make([]deliveryTimeline, 0, len(ds))
	for _, d := range ds {
		as, err := st.AttemptsOfDelivery(ctx, d.Account, d.ID, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, deliveryTimeline{Delivery: d, Timeline: as})
	}
	return out, nil
}

func printTimeline(g *Globals, d deliveryTimeline) error {
	tw := g.Table()
	rows := [][2]string{
		{"delivery", d.ID}, {"event", d.EventID + " (" + d.EventType + ")"}, {"endpoint", d.EndpointID + " (account " + d.Account + ")"},
		{"status", statusText(d.Delivery)}, {"attempts", attemptsText(d)}, {"created", fmtTime(d.CreatedAt)},
	}
	if d.DeliveredAt != nil {
		rows = append(rows, [2]string{"delivered", fmtTime(*d.DeliveredAt)})
	}
	if d.NextDueAt != nil {
		rows = append(rows, [2]string{"next due", fmtTime(*d.NextDueAt)})
	}
	if d.DLQOffset != nil && d.DLQPartition != nil {
		rows = append(rows, [2]string{"dead letter", fmt.Sprintf("%s partition %d offset %d", d.DLQTopic, *d.DLQPartition, *d.DLQOffset)})
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Timeline) == 0 {
		fmt.Fprintln(g.Out(), "no attempts logged yet")
		return nil
	}
	fmt.Fprintln(g.Out())
	tw = g.Table()
	fmt.Fprintln(tw, "#\tSTARTED\tTIER\tSTATUS\tOUTCOME\tLATENCY\tERROR\tNEXT\tREPLAY\tRESPONSE")
	for _, a := range d.Timeline {
		errText := a.ErrorClass
		if a.Error != "" {
			errText = a.Error
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Attempt, fmtTime(a.StartedAt), a.Tier, codeText(a.StatusCode),
			a.Outcome, (time.Duration(a.DurationMS) * time.Millisecond).String(), clip(errText, 50), a.NextAction,
			dash(a.ReplayID), clip(oneLineText(a.ResponseExcerpt), 40))
	}
	return tw.Flush()
}

// attemptsText counts the attempts of a timeline as its rows show them. A
// replay restarts attempt numbers at 1 and the delivery row keeps the
// highest number of any round, so the count is summed per round: "4 (3 +
// 1 after replay rpl_x)". Rows that made no request (deferred, skipped)
// are named apart. With no rows logged, the delivery row's count.
func attemptsText(d deliveryTimeline) string {
	if len(d.Timeline) == 0 {
		return fmt.Sprint(d.Attempts)
	}
	var rounds []string // "" for the first round, then replay ids
	made := map[string]int{}
	total, noRequest := 0, 0
	for _, a := range d.Timeline {
		if a.Outcome == string(attempt.OutcomeDeferred) || a.Outcome == string(attempt.OutcomeSkipped) {
			noRequest++
			continue
		}
		if _, seen := made[a.ReplayID]; !seen {
			rounds = append(rounds, a.ReplayID)
		}
		made[a.ReplayID]++
		total++
	}
	text := fmt.Sprint(total)
	if len(rounds) > 1 || (len(rounds) == 1 && rounds[0] != "") {
		parts := make([]string, 0, len(rounds))
		for _, r := range rounds {
			if r == "" {
				parts = append(parts, fmt.Sprint(made[r]))
			} else {
				parts = append(parts, fmt.Sprintf("%d after replay %s", made[r], r))
			}
		}
		text += " (" + strings.Join(parts, " + ") + ")"
	}
	if noRequest > 0 {
		text += fmt.Sprintf("; %d row(s) below made no request (deferred or skipped)", noRequest)
	}
	return text
}

func statusText(d store.Delivery) string {
	if d.Status == "dead" && d.DeadReason != "" {
		return "dead (" + d.DeadReason + ")"
	}
	return d.Status
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

func codeText(c int) string {
	if c == 0 {
		return "-"
	}
	return fmt.Sprint(c)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clip(s string, n int) string {
	if s == "" {
		return "-"
	}
	if len(s) > n {
		return s[:n-1] + "…"
	}
	return s
}

func oneLineText(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
