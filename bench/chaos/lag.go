package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// GroupLag describes hookd's consumer groups on the broker at addr: state,
// members and lag per topic, with the partitions still behind. It is what
// a stalled scenario prints to say which stage stopped.
func GroupLag(ctx context.Context, addr string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	groups, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Sprintf("listing groups: %v", err)
	}
	lags, err := adm.Lag(ctx, groups.Groups()...)
	if err != nil {
		return fmt.Sprintf("group lag: %v", err)
	}
	var b strings.Builder
	names := make([]string, 0, len(lags))
	for g := range lags {
		names = append(names, g)
	}
	sort.Strings(names)
	for _, g := range names {
		l := lags[g]
		fmt.Fprintf(&b, "group %s: state %s, %d members", g, l.State, len(l.Members))
		if err := l.Error(); err != nil {
			fmt.Fprintf(&b, ", error %v", err)
		}
		b.WriteString("\n")
		for _, t := range l.Lag.TotalByTopic().Sorted() {
			if t.Lag == 0 {
				continue
			}
			var behind []string
			for _, m := range l.Lag.Sorted() {
				if m.Topic == t.Topic && m.Lag > 0 {
					owner := "unassigned"
					if m.Member != nil {
						id := m.Member.MemberID
						owner = "member " + id[max(0, len(id)-6):]
					}
					behind = append(behind, fmt.Sprintf("p%d lag %d (%s)", m.Partition, m.Lag, owner))
				}
			}
			fmt.Fprintf(&b, "  %s lag %d: %s\n", t.Topic, t.Lag, strings.Join(behind, ", "))
		}
	}
	return b.String()
}
