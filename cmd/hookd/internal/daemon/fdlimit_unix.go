//go:build unix

package daemon

import (
	"fmt"
	"syscall"
)

// raiseFileLimit sets the soft RLIMIT_NOFILE to the hard limit and returns
// both. Go already raises it at start to one below the hard limit; doing
// it here keeps hookd's behaviour its own and gives the figures to log.
func raiseFileLimit() (soft, hard uint64, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("reading RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur < lim.Max {
		want := lim
		want.Cur = lim.Max
		// macOS refuses more than kern.maxfilesperproc (EINVAL): the limit
		// then stays where Go's runtime left it.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return uint64(lim.Cur), uint64(lim.Max), fmt.Errorf("setting RLIMIT_NOFILE to %d: %w", uint64(want.Cur), err)
		}
		lim = want
	}
	return uint64(lim.Cur), uint64(lim.Max), nil
}
