package dispatcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
)

// k9Receiver is one 127.0.0.1 server for every endpoint of the test, the
// endpoint id being the path. "flaky" endpoints answer 503 to the first two
// requests of a webhook-id, then 200; "slow" ones take 300ms per request
// and answer 500 to the first, then 200; "down" ones always answer 503.
type k9Receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	arrivals map[string][]k9Arrival // endpoint id + "/" + webhook-id
	inFlight map[string]int         // by kind
}

type k9Arrival struct {
	at     time.Time
	status int
}

func newK9Receiver(t *testing.T) *k9Receiver {
	rc := &k9Receiver{arrivals: map[string][]k9Arrival{}, inFlight: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		ep := strings.TrimPrefix(r.URL.Path, "/")
		kind := strings.SplitN(ep, "_", 3)[1]
		key := ep + "/" + r.Header.Get("webhook-id")
		rc.mu.Lock()
		n := len(rc.arrivals[key]) + 1
		rc.inFlight[kind]++
		rc.mu.Unlock()
		status := http.StatusServiceUnavailable
		switch kind {
		case "flaky":
			if n > 2 {
				status = http.StatusOK
			}
		case "slow":
			select { // the receiver's latency, so requests are in flight at the kill
			case <-time.After(300 * time.Millisecond):
			case <-r.Context().Done():
			}
			status = http.StatusInternalServerError
			if n > 1 {
				status = http.StatusOK
			}
		}
		rc.mu.Lock()
		rc.arrivals[key] = append(rc.arrivals[key], k9Arrival{at: at, status: status})
		rc.inFlight[kind]--
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *k9Receiver) snapshot() (map[string][]k9Arrival, map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	a := make(map[string][]k9Arrival, len(rc.arrivals))
	for k, v := range rc.arrivals {
		a[k] = append([]k9Arrival(nil), v...)
	}
	f := map[string]int{}
	for k, v := range rc.inFlight {
		f[k] = v
	}
	return a, f
}

// k9Topics reads the retry tiers, the DLQ and the attempts topic.
type k9Topics struct {
	mu       sync.Mutex
	retries  []*delivery.Delivery // with Topic set in retryTopic
	retryOn  []string
	dlq      map[string]int // delivery id -> dead letters
	dlqWhy   map[string]string
	attempts []*attempt.Record
}

func collectK9(t *testing.T, addr string, tiers []string) *k9Topics {
	c := &k9Topics{dlq: map[string]int{}, dlqWhy: map[string]string{}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(append([]string{"webhooks.dlq", "webhooks.attempts"}, tiers...)...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(250*time.Millisecond))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				c.mu.Lock()
				defer c.mu.Unlock()
				switch r.Topic {
				case "webhooks.attempts":
					if a, err := attempt.Decode(r); err == nil && !attempt.IsIntent(r) {
						c.attempts = append(c.attempts, a)
					}
				case "webhooks.dlq":
					d, err := delivery.Decode(r)
					p, perr := deadletter.Read(r)
					if err == nil && perr == nil {
						c.dlq[d.ID]++
						c.dlqWhy[d.ID] = p.Reason
					}
				default:
					if d, err := delivery.Decode(r); err == nil {
						c.retries = append(c.retries, d)
						c.retryOn = append(c.retryOn, r.Topic)
					}
				}
			})
		}
	}()
	return c
}

// TestKill9WithRetryTiers is issue 5's process-level acceptance: the real
// binaries (embedded broker, router, attempt-log, dispatcher) with a
// 1s,2s,4s schedule and 127.0.0.1 receivers, some failing their first
// attempts, some always failing. The dispatcher is killed with SIGKILL
// while records wait in the tiers and requests are in flight, then started
// again. Every delivery ends delivered (a 200 at the receiver) or
// dead-lettered; no attempt started before the hookd-due-at of the retry
// record it came from; every request has an attempt record (the killed
// process's requests in flight: outcome unknown, logged by its
// successor), and the duplicates are at most those requests.
// k9Concurrency is the dispatcher's in-flight cap (Config.Concurrency's
// default): the most requests a kill can leave on the wire.
const k9Concurrency = 256

func TestKill9WithRetryTiers(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test; builds the hookd binary")
	}
	t.Parallel()
	bin := proctest.Binary(t, "hookd")
	db := pgtest.New(t)
	rc := newK9Receiver(t)
	schedule := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
	tiers := []string{"webhooks.retry.1s", "webhooks.retry.2s", "webhooks.retry.4s"}

	// Six accounts, three endpoints each: few requests per endpoint, so no
	// breaker trips on the flaky ones (20 requests minimum).
	const accounts, perAccount = 6, 5
	kinds := []string{"flaky", "slow", "down"}
	ctx := context.Background()
	for a := range accounts {
		for _, k := range kinds {
			id := fmt.Sprintf("ep_%s_%d", k, a)
			_, err := db.Store.CreateEndpoint(ctx, endpoint.Endpoint{ID: id, Account: fmt.Sprintf("acct_%d", a),
				URL: rc.srv.URL + "/" + id, Secrets: []string{endpoint.NewSecret()}, Status: endpoint.StatusActive})
			require.NoError(t, err)
		}
	}

	env := []string{"HOOKD_LOG_LEVEL=warn"}
	kafka := startBroker(t, bin, env)
	common := []string{"--database-url", db.URL, "--brokers", kafka, "--partitions", "3", "--retry-schedule", "1s,2s,4s",
		"--replication-factor", "1", "--min-insync-replicas", "1"}
	role := func(name string, extra ...string) *proctest.Proc {
		listen := "127.0.0.1:" + strconv.Itoa(proctest.FreePort(t))
		p := proctest.Start(t, bin, env, append(append([]string{name}, common...), append(extra, "--listen", listen)...)...)
		p.WaitReady(listen, 60*time.Second)
		return p
	}
	role("router")
	role("attempt-log")
	dispatch := role("dispatch", "--allow-private-networks")
	topics := collectK9(t, kafka, tiers)

	producer, err := kgo.NewClient(kgo.SeedBrokers(kafka), kgo.DefaultProduceTopic("webhooks.events"))
	require.NoError(t, err)
	defer producer.Close()
	type want struct{ eventID, endpointID string }
	var wants []want
	var recs []*kgo.Record
	for a := range accounts {
		for n := range perAccount {
			id := fmt.Sprintf("evt_k9_%d_%d", a, n)
			v, err := json.Marshal(map[string]any{"id": id, "account": fmt.Sprintf("acct_%d", a), "type": "invoice.paid",
				"data": map[string]int{"n": n}})
			require.NoError(t, err)
			recs = append(recs, &kgo.Record{Key: []byte(fmt.Sprintf("acct_%d", a)), Value: v})
			for _, k := range kinds {
				wants = append(wants, want{id, fmt.Sprintf("ep_%s_%d", k, a)})
			}
		}
	}
	start := time.Now()
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, producer.ProduceSync(pctx, recs...).FirstErr())

	// Kill while retry records wait for a due time in the future and the
	// slow endpoints have requests in flight.
	waitingInTiers := func() int {
		topics.mu.Lock()
		defer topics.mu.Unlock()
		n := 0
		for _, d := range topics.retries {
			if d.DueAt.After(time.Now()) {
				n++
			}
		}
		return n
	}
	k9Eventually(t, 30*time.Second, "records waiting in tiers and requests in flight", func() bool {
		_, inFlight := rc.snapshot()
		return inFlight["slow"] > 0 && waitingInTiers() > 0
	}, dispatch)
	killedAt := time.Now()
	waitingAtKill := waitingInTiers()
	_, inFlightAtKill := rc.snapshot()
	dispatch.Kill()
	deadAt := time.Now() // Kill returns once the process is gone
	role("dispatch", "--allow-private-networks")
	restartedAt := time.Now()

	delivered := func(arr map[string][]k9Arrival, w want) bool {
		for _, a := range arr[w.endpointID+"/"+w.eventID] {
			if a.status == http.StatusOK {
				return true
			}
		}
		return false
	}
	done := func() (int, int) {
		arr, _ := rc.snapshot()
		topics.mu.Lock()
		defer topics.mu.Unlock()
		ok, dead := 0, 0
		for _, w := range wants {
			switch {
			case delivered(arr, w):
				ok++
			case topics.dlq[delivery.ID(w.eventID, w.endpointID)] > 0:
				dead++
			}
		}
		return ok, dead
	}
	k9Eventually(t, 50*time.Second, "every delivery delivered or dead-lettered", func() bool {
		ok, dead := done()
		return ok+dead == len(wants)
	}, nil)
	finished := time.Since(start)

	arr, _ := rc.snapshot()
	topics.mu.Lock()
	defer topics.mu.Unlock()
	// The always-failing endpoints end on the DLQ after every tier; the
	// others are delivered.
	dupDelivered, dupDead, deliveredN, deadN := 0, 0, 0, 0
	for _, w := range wants {
		id := delivery.ID(w.eventID, w.endpointID)
		oks := 0
		for _, a := range arr[w.endpointID+"/"+w.eventID] {
			if a.status == http.StatusOK {
				oks++
			}
		}
		if strings.HasPrefix(w.endpointID, "ep_down_") {
			require.Zero(t, oks, w)
			require.Equal(t, deadletter.ReasonRetriesExhausted, topics.dlqWhy[id], w)
		} else {
			require.Positive(t, oks, "%v delivered (dead-letter reason %q)", w, topics.dlqWhy[id])
		}
		if oks > 0 {
			deliveredN++
			dupDelivered += oks - 1
		}
		if n := topics.dlq[id]; n > 0 {
			deadN++
			dupDead += n - 1
		}
	}

	// No attempt before its due time: every attempt read from a tier
	// started at or after the hookd-due-at of a retry record of the same
	// delivery and attempt number on that tier (after a crash there may be
	// several: the attempt that produced it was repeated).
	minDue := map[string]time.Time{} // tier + delivery id + attempt
	for i, d := range topics.retries {
		k := topics.retryOn[i] + "|" + d.ID + "|" + strconv.Itoa(d.Attempt)
		if m, ok := minDue[k]; !ok || d.DueAt.Before(m) {
			minDue[k] = d.DueAt
		}
	}
	checked := 0
	var earliestGap time.Duration = time.Hour
	for _, a := range topics.attempts {
		tier := -1
		for i, name := range tiers {
			if a.Tier == name {
				tier = i
			}
		}
		if tier < 0 {
			continue
		}
		due, ok := minDue[a.Tier+"|"+a.DeliveryID+"|"+strconv.Itoa(a.Attempt)]
		require.True(t, ok, "attempt %d of %s read from %s, whose retry record was not seen", a.Attempt, a.DeliveryID, a.Tier)
		require.False(t, a.StartedAt.Before(due), "attempt %d of %s on %s started %s before its due time",
			a.Attempt, a.DeliveryID, a.Tier, due.Sub(a.StartedAt))
		earliestGap = min(earliestGap, a.StartedAt.Sub(due))
		checked++
	}
	require.Positive(t, checked)

	// The receiver's side: every request that reached it after the
	// restart is one of those attempt records (started no later than it
	// arrived), so the check above covers it; the killed process's
	// requests are matched by the unknown attempt records its successor
	// made of their intents. The last attempt records may still be on
	// their way: poll.
	match := func() (unmatchedBefore, unmatchedAfter, arrivals int, bad string) {
		arr, _ := rc.snapshot()
		starts := map[string][]time.Time{}
		for _, a := range topics.attempts {
			if a.StatusCode != 0 || a.Outcome == attempt.OutcomeUnknown {
				k := a.EndpointID + "/" + a.EventID
				starts[k] = append(starts[k], a.StartedAt)
			}
		}
		for k, as := range arr {
			sort.Slice(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
			free := starts[k]
			for _, a := range as {
				arrivals++
				found := false
				for i, st := range free { // any start not after it: the later arrivals can use each of them
					if !st.After(a.at) {
						free = append(free[:i:i], free[i+1:]...)
						found = true
						break
					}
				}
				switch {
				case found:
				case a.at.Before(restartedAt):
					unmatchedBefore++
				default:
					unmatchedAfter++
					bad = fmt.Sprintf("request to %s at %s", k, a.at.Format(time.RFC3339Nano))
				}
			}
		}
		return unmatchedBefore, unmatchedAfter, arrivals, bad
	}
	topics.mu.Unlock()
	k9Eventually(t, 30*time.Second, "an attempt record for every request", func() bool {
		topics.mu.Lock()
		defer topics.mu.Unlock()
		before, after, _, _ := match()
		return before == 0 && after == 0
	}, nil)
	topics.mu.Lock()
	unmatched, after, arrivalsN, bad := match()
	require.Zero(t, after, "a request after the restart without an attempt record, e.g. %s", bad)
	// Requests = attempt rows: the requests the killed process had on the
	// wire were logged by its successor (outcome unknown, from their
	// intents), and they are the only duplicates, at most the in-flight cap.
	require.Zero(t, unmatched, "requests of the killed process without an attempt record")
	unknown := 0
	for _, a := range topics.attempts {
		if a.Outcome == attempt.OutcomeUnknown {
			unknown++
		}
	}
	require.LessOrEqual(t, unknown, k9Concurrency, "unknown requests: at most the requests in flight")
	require.LessOrEqual(t, dupDelivered+dupDead, unknown, "duplicates beyond the requests on the wire at the kill")

	// Minimum gap check against the schedule at the receiver for the
	// deliveries the crash did not touch (one request per attempt).
	gapViolations, gapChecked := 0, 0
	doubled := doubledChains(topics.attempts)
	for k, as := range arr {
		sort.Slice(as, func(i, j int) bool { return as[i].at.Before(as[j].at) })
		if as[0].at.Before(deadAt) && as[len(as)-1].at.After(deadAt) || doubled[k] {
			// Reached by the killed process and by its successor, which
			// re-read from the watermark: attempts repeat and the
			// receiver cannot tell which is which. A record the killed
			// process deferred to a tier (no request) and its successor
			// read again from the deliveries topic makes two chains that
			// both start after the kill: its attempt log shows an attempt
			// number made twice.
			continue
		}
		gapChecked++
		for i := 1; i < len(as) && i <= len(schedule); i++ {
			if gap := as[i].at.Sub(as[i-1].at); gap < schedule[i-1] {
				gapViolations++
				t.Errorf("%s: request %d arrived %s after the one before, schedule says at least %s", k, i+1, gap, schedule[i-1])
			}
		}
	}
	require.Zero(t, gapViolations)

	t.Logf("kill -9 at %s with %d retry records not yet due and %v requests in flight; all %d deliveries settled %s after producing",
		killedAt.Sub(start).Round(time.Millisecond), waitingAtKill, inFlightAtKill, len(wants), finished.Round(time.Millisecond))
	t.Logf("delivered %d (duplicate 200s: %d), dead-lettered %d (duplicate dead letters: %d); %d requests at the receivers, %d of them from the killed process without an attempt record; %d requests of unknown outcome",
		deliveredN, dupDelivered, deadN, dupDead, arrivalsN, unmatched, unknown)
	t.Logf("%d tier attempts checked against hookd-due-at: the earliest started %s after its due time; %d deliveries untouched by the crash checked for the schedule's gaps at the receiver",
		checked, earliestGap.Round(time.Millisecond), gapChecked)
}

// k9Eventually polls cond until it holds or timeout passes; p, when not
// nil, must stay alive meanwhile.
func k9Eventually(t *testing.T, timeout time.Duration, what string, cond func() bool, p *proctest.Proc) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		if p != nil && p.Cmd.ProcessState != nil {
			t.Fatalf("process exited while waiting for %s:\n%s", what, p.Stderr())
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
}

// doubledChains names ("endpoint/event") the deliveries whose attempt log
// has an attempt number made more than once: two chains of retries, which
// a crash can start (the record re-read from the watermark beside the
// retry record it had already produced).
func doubledChains(attempts []*attempt.Record) map[string]bool {
	made := map[string]map[int]int{}
	out := map[string]bool{}
	for _, a := range attempts {
		if a.Outcome == attempt.OutcomeDeferred || a.Outcome == attempt.OutcomeSkipped {
			continue
		}
		k := a.EndpointID + "/" + a.EventID
		if made[k] == nil {
			made[k] = map[int]int{}
		}
		made[k][a.Attempt]++
		if made[k][a.Attempt] > 1 {
			out[k] = true
		}
	}
	return out
}
