package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
