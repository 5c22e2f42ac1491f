package kafkaconn

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Groups are the consumer groups of hookd's roles, whose lag is exported.
var Groups = []string{"hookd-router", "hookd-dispatchers", "hookd-attempt-log"}

// GroupCollector exports the broker-side view of hookd's consumer groups at
// scrape time: records not yet committed per group and topic (end offset
// minus committed offset, summed over partitions) and members per group.
// Every hookd process exports the same values: aggregate with max, not sum.
type GroupCollector struct {
	adm     *kadm.Client
	groups  []string
	timeout time.Duration

	lag     *prometheus.Desc
	members *prometheus.Desc
	errors  prometheus.Counter
}

// NewGroupCollector describes groups through cl; a scrape waits at most
// timeout for the brokers.
func NewGroupCollector(cl *kgo.Client, groups []string, timeout time.Duration) *GroupCollector {
	return &GroupCollector{
		adm: kadm.NewClient(cl), groups: groups, timeout: timeout,
		lag: prometheus.NewDesc("hookd_kafka_consumer_group_lag_records",
			"Records not yet committed by a hookd consumer group (end offset minus committed offset), summed over the topic's partitions.",
			[]string{"group", "topic"}, nil),
		members: prometheus.NewDesc("hookd_kafka_consumer_group_members",
			"Members of a hookd consumer group as the group coordinator sees them.", []string{"group"}, nil),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "hookd_kafka_consumer_group_describe_errors_total",
			Help: "Scrapes that could not describe a hookd consumer group or fetch its offsets (its lag and members are then missing)."}),
	}
}

// Describe implements prometheus.Collector.
func (c *GroupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.lag
	ch <- c.members
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *GroupCollector) Collect(ch chan<- prometheus.Metric) {
	defer c.errors.Collect(ch)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	lags, err := c.adm.Lag(ctx, c.groups...)
	if err != nil {
		c.errors.Inc()
		return
	}
	for _, g := range c.groups {
		l, ok := lags[g]
		if !ok || l.Error() != nil {
			c.errors.Inc()
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.members, prometheus.GaugeValue, float64(len(l.Members)), g)
		for topic, tl := range l.Lag.TotalByTopic() {
			ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(tl.Lag), g, topic)
		}
	}
}
