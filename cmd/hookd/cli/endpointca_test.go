package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/internal/tlstest"
	"github.com/hookd/hookd/internal/topics"
)

// TestEndpointCAFileFlag: --endpoint-ca-file reaches the dispatcher for
// run and dispatch; a file that cannot be read or holds no certificate is
// one line and exit 2, before anything starts.
func TestEndpointCAFileFlag(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	for _, cmd := range []string{"run", "dispatch"} {
		cli := parse(t, cmd, "--endpoint-ca-file", ca.File)
		f := cli.Dispatch.DispatchFlags
		if cmd == "run" {
			f = cli.Run.DispatchFlags
		}
		require.NoError(t, f.validate())
		require.Equal(t, ca.File, f.dispatcherConfig(topics.Config{}).EndpointCAFile, cmd)
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600))
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(t.TempDir(), "missing.pem"), "no such file or directory"},
		{notPEM, "not a PEM certificate bundle"},
	} {
		for _, cmd := range []string{"run", "dispatch"} {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), []string{cmd, "--endpoint-ca-file", tc.path}, &stdout, &stderr)
			require.Equal(t, ExitUsage, code, stderr.String())
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			require.Len(t, lines, 1, stderr.String())
			require.True(t, strings.HasPrefix(lines[0], "hookd: --endpoint-ca-file: "), lines[0])
			require.Contains(t, lines[0], tc.path)
			require.Contains(t, lines[0], tc.want)
		}
	}
}
