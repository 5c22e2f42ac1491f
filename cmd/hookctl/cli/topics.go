package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/retrytiers"
	"github.com/hookd/hookd/store"
)

// TopicsCmd groups the topic commands.
type TopicsCmd struct {
	List TopicsListCmd `cmd:"" help:"List hookd's topics with partitions, end offsets and retention; retry tier topics the schedule no longer names are listed too, with a warning while they hold records."`
}

// TopicsListCmd lists the topics.
type TopicsListCmd struct{}

// topicRow is one line of topics list: a topic of the layout, or a retry
// tier topic the schedule no longer names (Orphaned).
type topicRow struct {
	topics.Info
	// Orphaned marks a <prefix>.retry.* topic the retry schedule does not
	// name: the dispatcher no longer reads it.
	Orphaned bool `json:"orphaned,omitempty"`
	// Held is how many records an orphaned tier still holds (end offset
	// minus start offset over its partitions).
	Held int64 `json:"held,omitempty"`
}

// Run implements `hookctl topics list`.
func (TopicsListCmd) Run(ctx context.Context, g *Globals, kctx *kong.Context) error {
	cfg, source, err := g.scheduleFor(ctx, kctx)
	if err != nil {
		return err
	}
	cl, err := g.Kafka(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	infos, err := topics.List(ctx, adm, cfg)
	if err != nil {
		return err
	}
	rows := make([]topicRow, 0, len(infos))
	for _, i := range infos {
		rows = append(rows, topicRow{Info: i})
	}
	orphans, err := orphanedTiers(ctx, adm, cfg)
	if err != nil {
		return err
	}
	rows = append(rows, orphans...)
	if g.JSON() {
		return g.PrintJSON(rows)
	}
	fmt.Fprintf(g.Out(), "retry schedule %s (%s)\n", cfg.Schedule, source)
	if err := printTopics(g, rows); err != nil {
		return err
	}
	for _, o := range orphans {
		if o.Held > 0 {
			fmt.Fprintf(g.Out(), "warning: %s holds %d records but the retry schedule %s no longer names it: no dispatcher reads it; "+
				"run hookd with a schedule that names it until it drains\n", o.Name, o.Held, cfg.Schedule)
		}
	}
	return nil
}

func printTopics(g *Globals, rows []topicRow) error {
	tw := g.Table()
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tEND OFFSETS\tRETENTION")
	for _, r := range rows {
		switch {
		case r.Missing:
			fmt.Fprintf(tw, "%s\t-\t-\t(missing: start hookd to create it)\n", r.Name)
		case r.Orphaned:
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s (not in the schedule; %d records held)\n", r.Name, r.Partitions, r.EndOffsets, r.Retention, r.Held)
		default:
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.Name, r.Partitions, r.EndOffsets, r.Retention)
		}
	}
	return tw.Flush()
}

// scheduleFor is the topic layout to list and where its retry schedule came
// from: --retry-schedule (or HOOKD_RETRY_SCHEDULE) when given, else what
// hookd recorded in Postgres at start-up, else the default schedule.
func (g *Globals) scheduleFor(ctx context.Context, kctx *kong.Context) (topics.Config, string, error) {
	cfg, err := g.TopicsConfig()
	if err != nil {
		return cfg, "", err
	}
	if retryScheduleGiven(kctx) {
		return cfg, "from --retry-schedule", nil
	}
	st, err := g.Store(ctx)
	if err != nil {
		return cfg, fmt.Sprintf("the default: no installation record read (%s)", oneLine(err)), nil
	}
	defer st.Close()
	in, err := st.GetInstallation(ctx, cfg.Prefix)
	if errors.Is(err, store.ErrNotFound) {
		return cfg, "the default: no hookd has recorded a layout for prefix " + cfg.Prefix + " yet; pass --retry-schedule", nil
	}
	if err != nil {
		return cfg, fmt.Sprintf("the default: no installation record read (%s)", oneLine(err)), nil
	}
	sched, err := retrytiers.ParseSchedule(in.RetrySchedule)
	if err != nil {
		return cfg, "", fmt.Errorf("the recorded retry schedule %q: %w", in.RetrySchedule, err)
	}
	cfg.Schedule = sched
	return cfg, fmt.Sprintf("recorded by %s at %s", in.WrittenBy, in.UpdatedAt.UTC().Format("2006-01-02 15:04:05Z")), nil
}

// retryScheduleGiven reports whether --retry-schedule was given on the
// command line or through HOOKD_RETRY_SCHEDULE (kong marks defaults as set
// too, so the arguments are read).
func retryScheduleGiven(kctx *kong.Context) bool {
	if v, ok := os.LookupEnv("HOOKD_RETRY_SCHEDULE"); ok && v != "" {
		return true
	}
	if kctx == nil {
		return false
	}
	for _, a := range kctx.Args {
		if a == "--retry-schedule" || strings.HasPrefix(a, "--retry-schedule=") {
			return true
		}
	}
	return false
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// orphanedTiers lists the <prefix>.retry.* topics cfg's schedule does not
// name, with the records they still hold.
func orphanedTiers(ctx context.Context, adm *kadm.Client, cfg topics.Config) ([]topicRow, error) {
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	named := topics.NamesFor(cfg).Retry
	var names []string
	for _, name := range all.Names() {
		if strings.HasPrefix(name, cfg.Prefix+".retry.") && !slices.Contains(named, name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	slices.Sort(names)
	starts, err := adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("listing start offsets: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("listing end offsets: %w", err)
	}
	rows := make([]topicRow, 0, len(names))
	for _, name := range names {
		r := topicRow{Info: topics.Info{Name: name, Partitions: len(all[name].Partitions)}, Orphaned: true}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Topic != name || o.Err != nil {
				return
			}
			r.EndOffsets += o.Offset
			r.Held += o.Offset
			if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
				r.Held -= s.Offset
			}
		})
		rows = append(rows, r)
	}
	return rows, nil
}
