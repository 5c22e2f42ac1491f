package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/delivery"
)

// Trace says where lost deliveries stopped. For each pair ("endpoint/event
// id", as in Report.LostSample) it lists the event's records on the events
// topic and the pair's records on the deliveries and retry topics, each
// with the offset its consumer group has committed on that partition (a
// record below the committed offset was passed over as done). It reads the
// topics of prefix on the broker at addr from the start, for up to 30 s.
func Trace(ctx context.Context, addr, prefix string, pairs []string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeRegex(),
		kgo.ConsumeTopics("^"+strings.ReplaceAll(prefix, ".", `\.`)+`\.(events|deliveries|retry\..*)$`),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())) // what the router's aborted transactions wrote never happened
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	want := map[string]bool{}
	for _, p := range pairs {
		_, id, _ := strings.Cut(p, "/")
		want[id] = true
	}
	found := map[string][]string{} // pair or event id -> records
	readAll(ctx, cl, func(r *kgo.Record) {
		if strings.HasSuffix(r.Topic, ".events") {
			var env struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(r.Value, &env) == nil && want[env.ID] {
				found[env.ID] = append(found[env.ID], at(r))
			}
			return
		}
		for _, h := range r.Headers {
			if h.Key == delivery.HeaderEventID && want[string(h.Value)] {
				k := string(r.Key) + "/" + string(h.Value)
				found[k] = append(found[k], at(r))
			}
		}
	})
	committed := committedOffsets(ctx, cl)
	var b strings.Builder
	for _, p := range pairs {
		_, id, _ := strings.Cut(p, "/")
		fmt.Fprintf(&b, "%s: event %s; deliveries %s\n", p, orNone(found[id]), orNone(found[p]))
	}
	b.WriteString("committed offsets: " + committed)
	return b.String()
}

func at(r *kgo.Record) string { return fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset) }

func orNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

// readAll reads until nothing new came for 3 s, or 30 s.
func readAll(ctx context.Context, cl *kgo.Client, fn func(*kgo.Record)) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for idle := 0; idle < 3 && ctx.Err() == nil; {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		pcancel()
		if fs.NumRecords() == 0 {
			idle++
			continue
		}
		idle = 0
		fs.EachRecord(fn)
	}
}

// committedOffsets lists every group's committed offsets.
func committedOffsets(ctx context.Context, cl *kgo.Client) string {
	adm := kadm.NewClient(cl)
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, g := range groups.Groups() {
		offs, err := adm.FetchOffsets(ctx, g)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", g, err))
			continue
		}
		var ps []string
		offs.Each(func(o kadm.OffsetResponse) {
			ps = append(ps, fmt.Sprintf("%s/%d=%d", o.Topic, o.Partition, o.At))
		})
		sort.Strings(ps)
		parts = append(parts, g+": "+strings.Join(ps, " "))
	}
	return strings.Join(parts, "\n")
}
