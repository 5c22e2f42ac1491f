package dispatcher_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/internal/attempt"
)

// logBuffer is a dispatcher log shared by goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the lines holding substr.
func (b *logBuffer) lines(substr string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, line := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// count returns the lines holding every one of parts.
func (b *logBuffer) count(parts ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, line := range strings.Split(b.buf.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// topicNames maps the topic IDs of the cluster to names: requests from
// v13 (Produce, Fetch) name topics by ID.
func (b *bundle) topicNames() map[[16]byte]string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := kadm.NewClient(b.producer).ListTopics(ctx)
	require.NoError(b.t, err)
	names := map[[16]byte]string{}
	for _, d := range td {
		names[d.ID] = d.Topic
	}
	return names
}

// failProduces answers the next len(codes) Produce requests writing to
// topic with codes, one request each, every partition of the request
// failed: the broker refuses the whole request as a sick leader does.
// It returns the count of requests refused so far.
func (b *bundle) failProduces(topic string, codes ...int16) *atomic.Int32 {
	ids := b.topicNames()
	var n atomic.Int32
	b.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		hit := false
		for _, t := range req.Topics {
			hit = hit || t.Topic == topic || ids[t.TopicID] == topic
		}
		i := int(n.Load())
		if !hit || i >= len(codes) {
			return nil, nil, false
		}
		b.cluster.KeepControl()
		n.Add(1)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.BaseOffset = p.Partition, codes[i], -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	return &n
}

// Faults a produce can meet mid-batch: a leader moving, a timed-out
// write (both retried inside kgo), then a broker error kgo gives up on
// (UNKNOWN_SERVER_ERROR): the dispatcher must retry that one itself.
var produceFaults = []int16{
	kerr.NotLeaderForPartition.Code, kerr.RequestTimedOut.Code,
	kerr.UnknownServerError.Code, kerr.UnknownServerError.Code, kerr.NotLeaderForPartition.Code,
	kerr.UnknownServerError.Code,
}

// A produce failing mid-batch, for each record the dispatcher writes,
// costs time only: every delivery reaches the receiver, every record
// completes (retry, dead letter and attempt records), the offsets reach
// the end, duplicates stay bounded and the dispatcher keeps running.
// Fails without d.produce's retry (finish.go called ProduceSync once and
// left the record unfinished until a restart).
func TestProduceFaultsMidBatch(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int                  // the receiver's answer
		topic  func(*bundle) string // the topic whose produces fail
		check  func(t *testing.T, b *bundle, ids []string)
	}{
		{"attempt records", http.StatusOK, func(b *bundle) string { return b.names.Attempts }, nil},
		{"retry records", http.StatusServiceUnavailable, func(b *bundle) string { return b.names.Retry[0] },
			func(t *testing.T, b *bundle, ids []string) {
				eventually(t, 60*time.Second, func() bool {
					_, _, retries := b.col.snapshot()
					return len(retries) >= len(ids)
				}, "a retry record per delivery")
			}},
		{"dead letters", http.StatusGone, func(b *bundle) string { return b.names.DLQ },
			func(t *testing.T, b *bundle, ids []string) {
				eventually(t, 60*time.Second, func() bool {
					_, dlq, _ := b.col.snapshot()
					return len(dlq) >= len(ids)
				}, "a dead letter per delivery")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, setupOpts{partitions: 2, schedule: "1h"})
			rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(tc.status) })
			logs := &logBuffer{}
			refused := b.failProduces(tc.topic(b), produceFaults...)
			stop := b.start(dispatcher.Config{Group: "g-produce-faults", AllowPrivateNetworks: true}, runOpts{log: logs})

			const n = 40
			var ids, evs []string
			for i := range n {
				// An endpoint each: no breaker opens on the 503s.
				ep := fmt.Sprintf("ep_%03d", i)
				b.eps.set(dispatcher.Target{ID: ep, URL: rc.srv.URL})
				d := newDelivery(fmt.Sprintf("evt_%03d", i), ep)
				ids, evs = append(ids, d.ID), append(evs, d.EventID)
				b.produce(-1, d)
			}
			eventually(t, 60*time.Second, func() bool { return allAttempted(b, ids) }, "an attempt record per delivery")
			require.Equal(t, len(produceFaults), int(refused.Load()), "every fault injected")
			if tc.check != nil {
				tc.check(t, b, ids)
			}
			for _, ev := range evs {
				require.GreaterOrEqual(t, rc.count(ev), 1, "event %s never reached the receiver", ev)
			}
			require.LessOrEqual(t, rc.total()-n, n/2, "duplicates bounded")
			eventually(t, 30*time.Second, func() bool {
				sum, _ := b.committed("g-produce-faults", b.names.Deliveries)
				return sum == n
			}, "offsets committed to the end (no record left unfinished)")
			// One tracker covers every record kind the dispatcher produces:
			// an attempt record acknowledged between two refused dead
			// letters ends the outage, and the next refusal starts another.
			// Each outage is one WARN and one INFO, never one per failure.
			warns := logs.count("level=WARN", "producing retry, dead-letter and attempt records failing")
			require.GreaterOrEqual(t, warns, 1, "a WARN for the outage")
			require.LessOrEqual(t, warns, 3, "at most one WARN per refusal kgo gives up on (three UNKNOWN_SERVER_ERRORs)")
			require.Equal(t, warns, logs.count("level=INFO", "recovered"), "one INFO when each outage ends")
			stop() // Run returns nil: it kept running through the faults
		})
	}
}

// allAttempted reports whether every delivery of ids has an attempt record.
func allAttempted(b *bundle, ids []string) bool {
	for _, id := range ids {
		if len(b.col.attemptsFor(id)) == 0 {
			return false
		}
	}
	return true
}

// Commits failing for a while (the coordinator answering
// REQUEST_TIMED_OUT) are retried every CommitInterval; one WARN when they
// start failing, one INFO when they succeed again, and the offsets reach
// the end. Fails on the per-failure WARN the dispatcher logged before.
func TestCommitFailuresAreRetried(t *testing.T) {
	b := setup(t, setupOpts{partitions: 2})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	const failures = 8
	var refused atomic.Int32
	b.cluster.ControlKey(int16(kmsg.OffsetCommit), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.OffsetCommitRequest)
		if req.Group != "g-commit-faults" || refused.Load() >= failures {
			return nil, nil, false
		}
		b.cluster.KeepControl()
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.RequestTimedOut.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	logs := &logBuffer{}
	stop := b.start(dispatcher.Config{Group: "g-commit-faults", AllowPrivateNetworks: true}, runOpts{log: logs})
	const n = 30
	var ids, evs []string
	for i := range n {
		d := newDelivery(fmt.Sprintf("evt_%03d", i), "ep_1")
		ids, evs = append(ids, d.ID), append(evs, d.EventID)
		b.produce(-1, d)
	}
	eventually(t, 60*time.Second, func() bool { return refused.Load() == failures }, "every commit failure injected")
	eventually(t, 60*time.Second, func() bool {
		sum, _ := b.committed("g-commit-faults", b.names.Deliveries)
		return sum == n
	}, "offsets committed to the end after the failures")
	for i, id := range ids {
		require.Equal(t, 1, rc.count(evs[i]), "event %s: exactly once (no rebalance, no restart)", evs[i])
		eventually(t, 30*time.Second, func() bool { return len(b.col.attemptsFor(id)) == 1 }, "one attempt record for %s", id)
	}
	require.Equal(t, 1, logs.count("level=WARN"), "one WARN for the outage, not one per retry:\n%s", logs.lines("level=WARN"))
	require.Equal(t, 1, logs.count("level=WARN", "committing offsets failing"))
	// The broker has the offsets before the dispatcher's commit callback
	// has read the answer and logged the recovery.
	eventually(t, 10*time.Second, func() bool { return logs.count("level=INFO", "committing offsets recovered") > 0 },
		"the recovery logged")
	require.Equal(t, 1, logs.count("level=INFO", "committing offsets recovered"))
	stop()
}

// Fetch responses failing for a while (a partition error on every
// partition) cost time only: every record is delivered once, in
// partition order, and the failures log one WARN. Fails on the
// per-error WARN the dispatcher logged before.
func TestFetchErrorsAreRetried(t *testing.T) {
	b := setup(t, setupOpts{partitions: 2})
	rc := newReceiver(t, nil)
	b.eps.set(dispatcher.Target{ID: "ep_1", URL: rc.srv.URL})
	const n = 30
	var dids, evs []string
	for i := range n / 2 {
		d := newDelivery(fmt.Sprintf("evt_%03d", i), "ep_1")
		dids, evs = append(dids, d.ID), append(evs, d.EventID)
		b.produce(-1, d)
	}
	const failures = 6
	var refused atomic.Int32
	ids := b.topicNames()
	b.cluster.ControlKey(int16(kmsg.Fetch), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.FetchRequest)
		hit := false
		for _, t := range req.Topics {
			hit = hit || t.Topic == b.names.Deliveries || ids[t.TopicID] == b.names.Deliveries
		}
		if !hit || refused.Load() >= failures {
			return nil, nil, false
		}
		b.cluster.KeepControl()
		refused.Add(1)
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.UnknownServerError.Code
				rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = -1, -1, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	logs := &logBuffer{}
	stop := b.start(dispatcher.Config{Group: "g-fetch-faults", AllowPrivateNetworks: true}, runOpts{log: logs})
	for i := n / 2; i < n; i++ {
		d := newDelivery(fmt.Sprintf("evt_%03d", i), "ep_1")
		dids, evs = append(dids, d.ID), append(evs, d.EventID)
		b.produce(-1, d)
	}
	eventually(t, 60*time.Second, func() bool { return refused.Load() == failures }, "every fetch failure injected")
	eventually(t, 60*time.Second, func() bool { return rc.distinct() == n }, "every delivery received")
	eventually(t, 30*time.Second, func() bool {
		sum, _ := b.committed("g-fetch-faults", b.names.Deliveries)
		return sum == n
	}, "offsets committed to the end")
	for i, id := range dids {
		require.Equal(t, 1, rc.count(evs[i]), "event %s: exactly once", evs[i])
		eventually(t, 30*time.Second, func() bool { return len(b.col.attemptsFor(id)) == 1 }, "the attempt record of %s", id)
		require.Equal(t, attempt.OutcomeDelivered, b.col.attemptsFor(id)[0].Outcome)
	}
	require.Equal(t, 1, logs.count("level=WARN"), "one WARN for the outage, not one per error:\n%s", logs.lines("level=WARN"))
	require.Equal(t, 1, logs.count("level=WARN", "fetching records failing"))
	stop()
}

// A broker unreachable for longer than the session timeout (every
// connection closed as soon as a request arrives), with requests and
// produces in flight and more records written during the outage: the
// dispatcher keeps running, logs one WARN per kind of failing operation,
// and after the outage every record is delivered and completes. Set
// HOOKD_TEST_OUTAGE (a duration, 12s by default) for a longer outage.
// Fails on the WARN per commit retry (every CommitInterval) logged before.
func TestBrokerOutage(t *testing.T) {
	outage := 12 * time.Second
	if v := os.Getenv("HOOKD_TEST_OUTAGE"); v != "" {
		var err error
		outage, err = time.ParseDuration(v)
		require.NoError(t, err)
	}
	b := setup(t, setupOpts{partitions: 2})
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(50 * time.Millisecond) // a receiver's own latency, so requests are in flight
		w.WriteHeader(http.StatusOK)
	})
	var down atomic.Bool
	b.cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		b.cluster.KeepControl()
		return nil, errors.New("broker down"), true // closes the connection
	})
	logs := &logBuffer{}
	stop := b.start(dispatcher.Config{Group: "g-outage", AllowPrivateNetworks: true, SessionTimeout: 6 * time.Second}, runOpts{log: logs})
	const n = 60
	var evs []string
	for i := range n {
		ep := fmt.Sprintf("ep_%d", i%6)
		b.eps.set(dispatcher.Target{ID: ep, URL: rc.srv.URL})
		d := newDelivery(fmt.Sprintf("evt_%03d", i), ep)
		evs = append(evs, d.EventID)
		if i == n/2 {
			eventually(t, 30*time.Second, func() bool { return rc.inFlight.Load() > 0 }, "requests in flight")
			down.Store(true)
			start := time.Now()
			t.Logf("broker down for %s", outage)
			time.AfterFunc(outage, func() { down.Store(false); t.Logf("broker up after %s", time.Since(start)) })
		}
		// Blocks while the broker is down, as the router would.
		ctx, cancel := context.WithTimeout(context.Background(), outage+60*time.Second)
		require.NoError(t, b.producer.ProduceSync(ctx, d.Record(b.names.Deliveries)).FirstErr())
		cancel()
	}
	eventually(t, outage+60*time.Second, func() bool {
		sum, _ := b.committed("g-outage", b.names.Deliveries)
		return sum == n
	}, "offsets committed to the end")
	for _, ev := range evs {
		require.GreaterOrEqual(t, rc.count(ev), 1, "event %s never received", ev)
	}
	t.Logf("deliveries %d, duplicates %d; WARN lines:\n%s", n, rc.total()-n, logs.lines("level=WARN"))
	// At most one each: commits failing, fetches failing, produces
	// unanswered, the lost session's requests abandoned.
	require.LessOrEqual(t, logs.count("level=WARN"), 4, "one WARN per kind of failure, not one per retry")
	stop() // Run returns nil
}
