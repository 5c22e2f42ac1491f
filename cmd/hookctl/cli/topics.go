package cli

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/hookd/hookd/internal/topics"
)

// TopicsCmd groups the topic commands.
type TopicsCmd struct {
	List TopicsListCmd `cmd:"" help:"List hookd's topics with partitions, end offsets and retention."`
}

// TopicsListCmd lists the topics.
type TopicsListCmd struct{}

// Run implements `hookctl topics list`.
func (TopicsListCmd) Run(ctx context.Context, g *Globals) error {
	cfg, err := g.TopicsConfig()
	if err != nil {
		return err
	}
	cl, err := g.Kafka(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	infos, err := topics.List(ctx, kadm.NewClient(cl), cfg)
	if err != nil {
		return err
	}
	if g.JSON() {
		return g.PrintJSON(infos)
	}
	tw := g.Table()
	fmt.Fprintln(tw, "TOPIC\tPARTITIONS\tEND OFFSETS\tRETENTION")
	for _, i := range infos {
		if i.Missing {
			fmt.Fprintf(tw, "%s\t-\t-\t(missing: start hookd to create it)\n", i.Name)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", i.Name, i.Partitions, i.EndOffsets, i.Retention)
	}
	return tw.Flush()
}
