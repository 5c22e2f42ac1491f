// Package kafkatest starts an in-process Kafka-protocol broker (franz-go's
// kfake) for tests and provisions hookd's topics on it. It is for tests only.
//
// Internal: only hookd's own packages can import it.
package kafkatest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/internal/topics"
)

// Cluster is a running kfake broker.
type Cluster struct {
	*kfake.Cluster
	// Addrs are the broker addresses to dial.
	Addrs []string
}

// New starts a one-broker kfake cluster that stops when t ends.
func New(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Cluster{Cluster: c, Addrs: c.ListenAddrs()}
}

// NewProvisioned starts a cluster and creates hookd's topics for cfg.
func NewProvisioned(t testing.TB, cfg topics.Config) *Cluster {
	t.Helper()
	c := New(t)
	cl := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := topics.Provision(ctx, kadm.NewClient(cl), cfg); err != nil {
		t.Fatalf("kafkatest: provisioning topics: %v", err)
	}
	return c
}

// Client returns a client on the cluster, closed when t ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// FirstFetch starts watching the fetch requests the cluster receives (kfake
// answers them as usual); the function it returns waits for the first one
// and returns a copy of it (kfake changes the request while answering), or
// fails t after within.
func (c *Cluster) FirstFetch(t testing.TB, within time.Duration) func() *kmsg.FetchRequest {
	t.Helper()
	fetches := make(chan *kmsg.FetchRequest, 1)
	c.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := *r.(*kmsg.FetchRequest)
		req.Topics = nil
		for _, rt := range r.(*kmsg.FetchRequest).Topics {
			rt.Partitions = slices.Clone(rt.Partitions)
			req.Topics = append(req.Topics, rt)
		}
		select {
		case fetches <- &req:
		default:
		}
		return nil, nil, false // kfake answers it
	})
	return func() *kmsg.FetchRequest {
		t.Helper()
		select {
		case req := <-fetches:
			return req
		case <-time.After(within):
			t.Fatalf("kafkatest: no fetch within %s", within)
			return nil
		}
	}
}
