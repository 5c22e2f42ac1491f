package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// noRequestClasses are the error classes of attempts that never reached a
// receiver (dispatcher/outcome.go). Every other attempt, with a status code
// or not, stands for a request: a request whose outcome is unknown (its
// dispatcher died before recording it) counts as one too.
var noRequestClasses = []string{"connect_timeout", "connect_refused", "dns_error", "tls_error", "ssrf_refused",
	"circuit_open", "invalid_url", "invalid_secret", "backlog_full", "fair_share", "endpoint_disabled",
	"endpoint_deleted", "account_mismatch", "malformed"}

// madeRequest reports whether an attempt with this status and error class
// stands for a request a receiver got.
func madeRequest(status int, errorClass string) bool {
	return status != 0 || !slices.Contains(noRequestClasses, errorClass)
}

// intentHeader marks a dispatcher's intent record (produced before a
// request goes on the wire, read back by the dispatcher resuming the
// partition). Dispatchers write them to the intents topic now; older ones
// wrote them to the attempts topic, where they are skipped: an intent is
// not an attempt record.
const intentHeader = "hookd-intent"

func isIntent(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == intentHeader {
			return true
		}
	}
	return false
}

// AttemptSeen is one attempt record read from the attempts topic, with its
// place there.
type AttemptSeen struct {
	Partition  int32
	Offset     int64
	EndpointID string
	EventID    string
	// Requested: the attempt made a request (see madeRequest).
	Requested bool
	// Time is the record's timestamp (set by its producer).
	Time time.Time
}

// CommittedEnds returns the end offsets (last stable, read_committed) of
// every partition of topic: what a reader of the topic, such as a
// dispatcher resuming a partition, can see at this moment.
func CommittedEnds(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	offs, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	if err := offs.Error(); err != nil {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	offs.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out, nil
}

// ReadAttempts reads the attempts topic (read_committed) from its start to
// its current end.
func ReadAttempts(ctx context.Context, addr, topic string) ([]AttemptSeen, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := CommittedEnds(ctx, kadm.NewClient(cl), topic)
	if err != nil {
		return nil, err
	}
	parts := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for p, end := range ends {
		if end > 0 {
			parts[p] = kgo.NewOffset().AtStart()
			left[p] = end
		}
	}
	if len(parts) == 0 {
		return nil, nil
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts})
	var out []AttemptSeen
	for len(left) > 0 {
		// A partition whose last offsets are transaction markers or aborted
		// records never yields its last offset: a poll that brings nothing
		// for a few seconds ends the read.
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("reading %s: %w", topic, err)
		}
		if fs.NumRecords() == 0 && pctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if r.Offset >= ends[r.Partition] || isIntent(r) {
				return // past the end read at the start; not an attempt
			}
			var v struct {
				EventID    string `json:"event_id"`
				EndpointID string `json:"endpoint_id"`
				StatusCode int    `json:"status_code"`
				ErrorClass string `json:"error_class"`
			}
			if json.Unmarshal(r.Value, &v) == nil {
				out = append(out, AttemptSeen{Partition: r.Partition, Offset: r.Offset, EndpointID: v.EndpointID,
					EventID: v.EventID, Requested: madeRequest(v.StatusCode, v.ErrorClass), Time: r.Timestamp})
			}
		})
	}
	return out, nil
}
