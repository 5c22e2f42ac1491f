package chaos

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/wait"
)

// Each duplicate goes to the fault at which its pair was in flight, else
// to the first fault after its first 2xx request; a crash may cause as many
// as it had in flight (open at the receivers, or answered with no attempt
// record below the fault's offsets), any other fault none, and a duplicate
// with no fault before it (nor a rebalancing one shortly before the first
// request) is a problem of its own.
func TestAttributeDuplicates(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ok := func(ep, id string, conn uint64, start, done time.Duration) Request {
		return Request{EndpointID: ep, WebhookID: id, Status: 200, Conn: conn, At: at(start), Done: at(done)}
	}
	crash := Fault{What: "kill -9 dispatch-0", Kind: FaultCrash, At: at(10 * time.Second),
		Conns: map[uint64]bool{1: true}, AttemptEnds: map[int32]int64{0: 5}}
	graceful := Fault{What: "SIGTERM dispatch-1", Kind: FaultGraceful, At: at(30 * time.Second),
		Conns: map[uint64]bool{7: true}, AttemptEnds: map[int32]int64{0: 9}}
	reqs := []Request{
		// a: on the wire at the crash (answered after it), sent again.
		ok("e", "a", 1, 9*time.Second, 10*time.Second+10*time.Millisecond), ok("e", "a", 2, 15*time.Second, 15*time.Second),
		// b: answered before the crash, its record not below offset 5.
		ok("e", "b", 1, 9*time.Second, 9*time.Second+500*time.Millisecond), ok("e", "b", 2, 16*time.Second, 16*time.Second),
		// c: answered and logged before the crash, yet sent again.
		ok("e", "c", 1, 8*time.Second, 8*time.Second), ok("e", "c", 2, 16*time.Second, 16*time.Second),
		// d: another dispatcher's, never sent twice: not in flight.
		ok("e", "d", 3, 9*time.Second, 11*time.Second),
		// f: duplicated across the graceful stop.
		ok("e", "f", 7, 25*time.Second, 25*time.Second), ok("e", "f", 2, 35*time.Second, 35*time.Second),
		// h: sent before the crash, read by the receiver only after it, and
		// sent again after a broker restart: the crash's.
		ok("e", "h", 1, 10*time.Second+50*time.Millisecond, 10*time.Second+60*time.Millisecond), ok("e", "h", 2, 16*time.Second, 16*time.Second),
		// g: duplicated with no fault in between.
		ok("e", "g", 2, 40*time.Second, 40*time.Second), ok("e", "g", 2, 41*time.Second, 41*time.Second),
	}
	attempts := []AttemptSeen{
		{Partition: 0, Offset: 3, EndpointID: "e", EventID: "c", Requested: true},
		{Partition: 0, Offset: 5, EndpointID: "e", EventID: "b", Requested: true}, // after the crash's end
		{Partition: 0, Offset: 6, EndpointID: "e", EventID: "f", Requested: true},
	}
	broker := Fault{What: "broker kill -9", Kind: FaultExternal, At: at(12 * time.Second), Rebalances: true}
	rep := AttributeDuplicates(reqs, []Fault{crash, broker, graceful}, attempts)
	c, b, g := rep.Faults[0], rep.Faults[1], rep.Faults[2]
	if c.Open != 2 || c.Unlogged != 1 || c.InFlight != 3 || c.Duplicates != 4 || c.Allowed != 3 {
		t.Errorf("crash: %+v, want open 2, unlogged 1, in flight 3, duplicates 4, allowed 3", c)
	}
	if b.Duplicates != 0 {
		t.Errorf("broker restart: %+v, want no duplicate (a, b and h were in flight at the crash, c's first request came before it)", b)
	}
	if g.InFlight != 0 || g.Duplicates != 1 || g.Allowed != 0 {
		t.Errorf("graceful stop: %+v, want in flight 0 (f was logged at offset 6), duplicates 1, allowed 0", g)
	}
	if rep.Unattributed != 1 || rep.Total != 6 {
		t.Errorf("unattributed %d, total %d, want 1 and 6", rep.Unattributed, rep.Total)
	}
	want := []string{
		"fault 1 (kill -9 dispatch-0 at 12:00:10.000): 4 duplicates, more than the 3 requests in flight (2 open, 1 answered without an attempt record); e.g. ",
		"fault 3 (SIGTERM dispatch-1 at 12:00:30.000): 1 duplicates; a graceful fault may cause none (0 requests of the process in flight); e.g. e/f at 12:00:25.000 and 12:00:35.000",
		"1 duplicates with no fault between the first 2xx request and the duplicate, nor a dispatcher or broker fault up to 20s before it",
	}
	// The crash's sample depends on map order: compare up to "e.g.".
	got := append([]string(nil), rep.Problems...)
	if len(got) > 0 {
		got[0] = got[0][:strings.Index(got[0], "e.g. ")+len("e.g. ")]
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(rep.Problems, "\n"), strings.Join(want, "\n"))
	}
	// A graceful stop of a dispatcher sets off rebalances: g's duplicate,
	// 10 s after it, is its too.
	rebalancing := graceful
	rebalancing.Rebalances = true
	rep = AttributeDuplicates(reqs, []Fault{crash, broker, rebalancing}, attempts)
	if rep.Faults[2].Duplicates != 2 || rep.Unattributed != 0 {
		t.Errorf("with rebalances: graceful stop %+v, unattributed %d; want 2 duplicates and none unattributed", rep.Faults[2], rep.Unattributed)
	}
	// Without c's duplicate the crash is within its bound.
	rep = AttributeDuplicates(append(reqs[:5:5], reqs[6:11]...), []Fault{crash, broker, graceful}, attempts)
	if rep.Faults[0].Duplicates != 3 || len(rep.Problems) != 1 {
		t.Errorf("without c: crash %+v, problems %q; want 3 duplicates and only the graceful stop's problem", rep.Faults[0], rep.Problems)
	}
}

// LocalPorts reads a process's sockets from /proc and ConnsFrom maps their
// ports to the receiver's connections: here this test's own client.
func TestLocalPortsNameTheSendersConnections(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	r, err := StartReceiver(ReceiverOptions{KeepRequests: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	url, err := r.Add(EndpointSpec{ID: "ok", Secret: secret, Behave: BehaveOK})
	if err != nil {
		t.Fatal(err)
	}
	var local string
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				local = c.LocalAddr().String()
			}
			return c, err
		}}}
	defer client.CloseIdleConnections()
	if resp, err := signedPost(t, client, url, secret, "evt_1"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST: %v %v", resp, err)
	}
	wait.For(t, 5*time.Second, "the request recorded", func() bool { return len(r.Requests()) == 1 })
	ports, err := LocalPorts(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(local)
	if !ports[mustAtoi(t, port)] {
		t.Fatalf("the client's port %s is not among the process's %v", port, ports)
	}
	conns := r.ConnsFrom(ports, time.Now())
	if got := r.Requests()[0].Conn; got == 0 || !conns[got] || len(conns) != 1 {
		t.Fatalf("ConnsFrom = %v, the request came on connection %d", conns, got)
	}
	if len(r.ConnsFrom(map[int]bool{1: true}, time.Now())) != 0 {
		t.Fatal("ConnsFrom of a port nobody used is not empty")
	}
	if len(r.ConnsFrom(ports, time.Now().Add(-time.Hour))) != 0 {
		t.Fatal("ConnsFrom until before the connection was accepted is not empty")
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// WaitStopped waits for every thread of a process to be stopped: it
// times out on a running process and returns once SIGSTOP took effect.
func TestWaitStoppedSeesSIGSTOP(t *testing.T) {
	p, err := StartProc("sleeper", "sleep", nil, filepath.Join(t.TempDir(), "sleeper.log"), "60")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill9()
	if err := WaitStopped(p.Pid(), 20*time.Millisecond); err == nil {
		t.Fatal("WaitStopped returned nil for a running process")
	}
	if err := p.Freeze(); err != nil {
		t.Fatal(err)
	}
	if err := WaitStopped(p.Pid(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// A process restarted within connGrace of its kill (`hookd run`) reuses
// the ports it held: a connection accepted after the restart is its
// successor's, not one it held at the fault.
func TestResolveConnsRestarted(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	r := &Receiver{connsByAddr: map[string][]connAccept{
		"127.0.0.1:40001": {{id: 1, at: t0.Add(-time.Second)}, {id: 2, at: t0.Add(300 * time.Millisecond)}},
		"127.0.0.1:40002": {{id: 3, at: t0.Add(-time.Second)}},
	}}
	ports := map[int]bool{40001: true, 40002: true}
	faults := []Fault{
		{At: t0, Ports: ports},
		{At: t0, Ports: ports, Restarted: t0.Add(200 * time.Millisecond)},
	}
	ResolveConns(faults, r)
	if c := faults[0].Conns; len(c) != 2 || !c[2] || !c[3] {
		t.Errorf("without a restart: conns %v, want 2 and 3 (the last accepted within connGrace)", c)
	}
	if c := faults[1].Conns; len(c) != 2 || !c[1] || !c[3] {
		t.Errorf("restarted 200ms after: conns %v, want 1 and 3 (2 is the successor's)", c)
	}
}

// The ends of a fault whose process hosted the broker are taken from the
// records' timestamps: the records produced at or before the fault are the
// ones that survived it; those after are the restarted process's.
func TestResolveEnds(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	attempts := []AttemptSeen{
		{Partition: 0, Offset: 3, Time: t0.Add(-time.Second)},
		{Partition: 0, Offset: 7, Time: t0},
		{Partition: 0, Offset: 9, Time: t0.Add(time.Second)},
		{Partition: 1, Offset: 0, Time: t0.Add(time.Second)},
		{Partition: 2, Offset: 4, Time: t0.Add(-time.Millisecond)},
	}
	given := map[int32]int64{0: 1}
	faults := []Fault{{At: t0, BrokerInside: true}, {At: t0}, {At: t0, BrokerInside: true, AttemptEnds: given}}
	ResolveEnds(faults, attempts)
	if e := faults[0].AttemptEnds; len(e) != 2 || e[0] != 8 || e[2] != 5 {
		t.Errorf("ends %v, want partition 0 at 8, 2 at 5, none for 1", e)
	}
	if faults[1].AttemptEnds != nil {
		t.Errorf("a fault of a process without the broker got ends %v", faults[1].AttemptEnds)
	}
	if e := faults[2].AttemptEnds; len(e) != 1 || e[0] != 1 {
		t.Errorf("ends read at the fault were replaced: %v", e)
	}
}

// A delivery re-sent by each next owner just before that owner is killed
// too (the kill loop: an owner is killed 0.3 s after it is given
// partitions): each request is in flight at the next kill and each kill
// causes one duplicate. The request that reaches the receiver only after
// its own process was frozen is in flight at that fault, but it is the
// previous fault's duplicate, not that fault's.
func TestAttributeDuplicatesReSentAcrossKills(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ms := time.Millisecond
	ok := func(conn uint64, start time.Duration) Request {
		return Request{EndpointID: "e", WebhookID: "r", Status: 200, Conn: conn, At: at(start), Done: at(start + 5*ms)}
	}
	crash := func(s time.Duration, conn uint64) Fault {
		return Fault{What: "kill -9", Kind: FaultCrash, At: at(s), Conns: map[uint64]bool{conn: true}, AttemptEnds: map[int32]int64{0: 0}}
	}
	reqs := []Request{ok(11, 10*time.Second-2*ms), ok(12, 20*time.Second-2*ms), ok(13, 30*time.Second+10*ms), ok(14, 39*time.Second)}
	rep := AttributeDuplicates(reqs, []Fault{crash(10*time.Second, 11), crash(20*time.Second, 12), crash(30*time.Second, 13)}, nil)
	for i, f := range rep.Faults {
		if f.InFlight != 1 || f.Duplicates != 1 {
			t.Errorf("fault %d: in flight %d, duplicates %d; want 1 and 1", i+1, f.InFlight, f.Duplicates)
		}
	}
	if !rep.OK() {
		t.Errorf("problems: %v", rep.Problems)
	}
}
