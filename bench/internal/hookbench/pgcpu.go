package hookbench

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

// postmasterPID finds the server's postmaster: the parent of a backend of
// ours. It fails for a server on another machine (or in a container with
// its own /proc), whose CPU hookbench then does not report.
func postmasterPID(ctx context.Context, base string) (int, error) {
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

// serverCPU is the Postgres server's CPU time so far: the postmaster's own,
// that of its children that have exited (cutime and cstime: backends of
// closed connections) and that of the live ones.
func serverCPU(postmaster int) (time.Duration, error) {
	f, err := statFields(postmaster)
	if err != nil {
		return 0, err
	}
	total := ticks(f, 11, 12, 13, 14)
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	parent := strconv.Itoa(postmaster)
	for _, p := range stats {
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if cf, err := statFields(pid); err == nil && cf[1] == parent {
			total += ticks(cf, 11, 12)
		}
	}
	return total, nil
}

// pgCPUMeter measures the server's CPU between two reads; a zero meter
// (no local server) measures nothing.
type pgCPUMeter struct{ postmaster int }

func (m pgCPUMeter) read() (time.Duration, bool) {
	if m.postmaster == 0 {
		return 0, false
	}
	d, err := serverCPU(m.postmaster)
	return d, err == nil
}
