//go:build unix

package daemon

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A soft open-file limit below the hard one is raised to it. Not parallel:
// it changes the test process's own limit.
func TestRaiseFileLimit(t *testing.T) {
	var orig syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig))
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	if uint64(orig.Max) < 512 {
		t.Skipf("hard limit %d too low to lower the soft one under it", uint64(orig.Max))
	}
	low := orig
	low.Cur = 256
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low))

	soft, hard, err := raiseFileLimit()
	require.NoError(t, err)
	require.Equal(t, uint64(orig.Max), hard)
	require.Equal(t, hard, soft)
	var now syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now))
	require.Equal(t, orig.Max, now.Cur)
}
