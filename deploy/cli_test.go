package deploy_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/stretchr/testify/require"

	hookdcli "github.com/hookd/hookd/cmd/hookd/cli"
	"github.com/hookd/hookd/retrytiers"
)

// commandEnvs returns, per hookd command path ("dispatch", "run", ...), the
// environment variables its flags read (global flags included).
func commandEnvs(t *testing.T) map[string][]string {
	t.Helper()
	var cli hookdcli.CLI
	parser, err := kong.New(&cli, kong.Name("hookd"), kong.Vars{"retry_schedule": retrytiers.DefaultSchedule})
	require.NoError(t, err)
	out := map[string][]string{}
	var walk func(n *kong.Node, path string, inherited []string)
	walk = func(n *kong.Node, path string, inherited []string) {
		envs := slices.Clone(inherited)
		for _, f := range n.Flags {
			envs = append(envs, f.Envs...)
		}
		if path != "" {
			out[path] = envs
		}
		for _, c := range n.Children {
			walk(c, strings.TrimSpace(path+" "+c.Name), envs)
		}
	}
	walk(parser.Model.Node, "", nil)
	return out
}

// checkCommandEnv checks that `hookd <args>` has a flag for every variable
// of env, and that hookd's own parser accepts every value (a bad duration,
// number or enum fails here, not at 3 a.m.). Values are fed through a kong
// resolver, never through the process environment.
func checkCommandEnv(t *testing.T, where string, args []string, env map[string]string) {
	t.Helper()
	require.NotEmpty(t, args, "%s: no command", where)
	envs := commandEnvs(t)
	cmdEnvs, ok := envs[args[0]]
	require.True(t, ok, "%s runs 'hookd %s', which is not a hookd command", where, args[0])
	var unknown []string
	for k := range env {
		if !slices.Contains(cmdEnvs, k) {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	require.Empty(t, unknown, "%s: 'hookd %s' has no flag reading these variables", where, args[0])

	var cli hookdcli.CLI
	resolver := kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
		for _, e := range f.Envs {
			if v, ok := env[e]; ok {
				return v, nil
			}
		}
		return nil, nil
	})
	parser, err := kong.New(&cli, kong.Name("hookd"), kong.Vars{"retry_schedule": retrytiers.DefaultSchedule},
		kong.Resolvers(resolver), kong.Exit(func(int) { panic(fmt.Sprintf("%s: hookd exited while parsing", where)) }))
	require.NoError(t, err)
	_, err = parser.Parse(args)
	require.NoError(t, err, "%s: hookd %s rejects its configuration", where, strings.Join(args, " "))
}

func TestCheckCommandEnvCatchesBadValues(t *testing.T) {
	t.Parallel()
	// The checker itself must be able to fail.
	var cli hookdcli.CLI
	bad := map[string]string{"HOOKD_PARTITIONS": "twelve"}
	resolver := kong.ResolverFunc(func(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
		for _, e := range f.Envs {
			if v, ok := bad[e]; ok {
				return v, nil
			}
		}
		return nil, nil
	})
	parser, err := kong.New(&cli, kong.Name("hookd"), kong.Vars{"retry_schedule": retrytiers.DefaultSchedule}, kong.Resolvers(resolver))
	require.NoError(t, err)
	_, err = parser.Parse([]string{"dispatch"})
	require.Error(t, err)
	require.NotContains(t, commandEnvs(t)["migrate"], "HOOKD_BROKERS", "migrate has no Kafka flags")
	require.Contains(t, commandEnvs(t)["dispatch"], "HOOKD_KAFKA_SASL_PASSWORD")
}
