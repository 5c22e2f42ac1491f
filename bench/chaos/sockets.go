package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// LocalPorts returns the local ports of the TCP sockets the process pid
// holds open, read from /proc (Linux): with Receiver.ConnsFrom, the
// connections a dispatcher holds to the receivers at a fault. The process
// should be frozen (SIGSTOP) for the answer to stay true.
func LocalPorts(pid int) (map[int]bool, error) {
	inodes, err := socketInodes(pid)
	if err != nil {
		return nil, err
	}
	ports := map[int]bool{}
	for _, table := range []string{"tcp", "tcp6"} {
		if err := scanTCPTable(fmt.Sprintf("/proc/%d/net/%s", pid, table), inodes, ports); err != nil {
			return nil, err
		}
	}
	return ports, nil
}

// socketInodes returns the inodes of the sockets among pid's descriptors.
func socketInodes(pid int) (map[string]bool, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the descriptors of pid %d: %w", pid, err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed since ReadDir
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			out[strings.TrimSuffix(inode, "]")] = true
		}
	}
	return out, nil
}

// scanTCPTable adds to ports the local port of every row of a
// /proc/net/tcp{,6} table whose inode is in inodes. A row is
// "sl local_address rem_address st ... uid timeout inode ...", addresses
// as hex IP:port.
func scanTCPTable(path string, inodes map[string]bool, ports map[int]bool) error {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil // no IPv6
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 10 || !inodes[fs[9]] {
			continue
		}
		_, hexPort, ok := strings.Cut(fs[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil {
			ports[int(p)] = true
		}
	}
	return sc.Err()
}

// WaitStopped polls /proc until every thread of pid is stopped (state T,
// after SIGSTOP) or timeout: SIGSTOP returns once the signal is queued,
// and a thread on another CPU may still run for a moment.
func WaitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d: %d threads still running %s after SIGSTOP", pid, running, timeout)
		}
		time.Sleep(time.Millisecond) // polling interval
	}
}

// runningThreads counts the threads of pid not in state T (stopped).
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("reading the threads of pid %d: %w", pid, err)
	}
	n := 0
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "stat"))
		if err != nil {
			continue // exited since ReadDir
		}
		// The state follows the command name, which is in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || b[i+2] != 'T' {
			n++
		}
	}
	return n, nil
}
