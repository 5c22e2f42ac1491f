// Package pgcpu measures the CPU time of a Postgres server running on this
// machine, from /proc: the postmaster's own, that of its exited children
// (the backends of closed connections, reaped into the postmaster's cutime
// and cstime) and that of its live ones. Benchmarks use it to report what a
// delivery costs the database, not only hookd's processes.
//
// Internal: only hookd's own packages can import it.
package pgcpu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// Linux everywhere that matters).
const clockTicks = 100

// PostmasterPID finds the server's postmaster: the parent of a backend of
// ours. It fails for a server on another machine (or in a container with
// its own /proc), whose CPU then cannot be measured.
func PostmasterPID(ctx context.Context, base string) (int, error) {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return 0, err
	}
	f, err := statFields(backend)
	if err != nil {
		return 0, fmt.Errorf("the Postgres server is not a local process: %w", err)
	}
	return strconv.Atoi(f[1])
}

// statFields returns the fields of /proc/<pid>/stat after the command name
// (f[0] is the state, f[1] the parent pid, f[11..14] utime, stime, cutime,
// cstime).
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 > len(b) {
		return nil, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+2:]))
	if len(f) < 15 {
		return nil, errors.New("short /proc stat")
	}
	return f, nil
}

func ticks(f []string, idx ...int) time.Duration {
	var n int64
	for _, i := range idx {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		n += v
	}
	return time.Duration(n) * time.Second / clockTicks
}

// consistentReads bounds serverCPU's attempts at a reading during which no
// backend was reaped; consistentPause separates them.
const (
	consistentReads = 50
	consistentPause = 10 * time.Millisecond
)

// serverCPU is the Postgres server's CPU time so far: the postmaster's own,
// that of its children that have exited (cutime and cstime: backends of
// closed connections) and that of the live ones; walSender is the part of
// the live WAL senders (the relay's logical decoding).
//
// A backend reaped while its siblings are read is in neither part if the
// postmaster was read first (or in both if last): when a client closes
// many connections at once, that lost most of its CPU (a River run read 10
// µs per delivery instead of ~90). So the postmaster is read before and
// after the backends, and the reading is kept only if no child was reaped
// in between (its children's times did not move); else it is taken again.
func serverCPU(postmaster int) (total, walSender time.Duration, err error) {
	for range consistentReads {
		before, err := statFields(postmaster)
		if err != nil {
			return 0, 0, err
		}
		live, ws := liveChildren(postmaster)
		after, err := statFields(postmaster)
		if err != nil {
			return 0, 0, err
		}
		if ticks(before, 13, 14) == ticks(after, 13, 14) {
			return ticks(after, 11, 12, 13, 14) + live, ws, nil
		}
		time.Sleep(consistentPause) // backends are exiting: let them
	}
	return 0, 0, fmt.Errorf("postmaster %d reaped backends during each of %d reads", postmaster, consistentReads)
}

// liveChildren returns the CPU time of postmaster's live children, and the
// part of it that is WAL senders'.
func liveChildren(postmaster int) (total, walSender time.Duration) {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := strconv.Itoa(postmaster)
	for _, p := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		cf, err := statFields(pid)
		if err != nil || cf[1] != parent {
			continue
		}
		t := ticks(cf, 11, 12)
		total += t
		// Backends name themselves in their command line
		// ("postgres: 15/main: walsender user db ...").
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmd, []byte(" walsender ")) {
			walSender += t
		}
	}
	return total, walSender
}

// Meter measures the server's CPU between two reads; a zero Meter (no
// local server) measures nothing.
type Meter struct {
	// Postmaster is the server's postmaster pid (PostmasterPID).
	Postmaster int
}

// Reading is one read of the server's CPU.
type Reading struct {
	// OK is false when the server's CPU could not be read.
	OK bool
	// Total is the whole server's CPU time so far; WALSender the part of
	// its live WAL senders (logical decoding for a relay).
	Total, WALSender time.Duration
}

// Read reads the server's CPU time so far.
func (m Meter) Read() Reading {
	if m.Postmaster == 0 {
		return Reading{}
	}
	total, ws, err := serverCPU(m.Postmaster)
	return Reading{OK: err == nil, Total: total, WALSender: ws}
}

// PerDelivery returns the server's and the WAL senders' CPU µs per
// delivery between two readings (zeros without both).
func PerDelivery(before, after Reading, deliveries int) (total, walSender float64) {
	if !before.OK || !after.OK {
		return 0, 0
	}
	d := float64(max(deliveries, 1))
	return (after.Total - before.Total).Seconds() / d * 1e6, max(after.WALSender-before.WALSender, 0).Seconds() / d * 1e6
}
