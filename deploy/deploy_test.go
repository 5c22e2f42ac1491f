// Package deploy holds hookd's deployment artefacts (Dockerfile, Prometheus
// configuration, dashboards, manifests). Docker cannot run on the machines
// hookd is tested on, so these tests check what can be checked without it:
// the files parse, they name only real hookd commands and environment
// variables, and the Dockerfile's build flags produce a static binary.
package deploy_test

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	hookdcli "github.com/hookd/hookd/cmd/hookd/cli"
)

type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]any    `yaml:"environment"`
		Healthcheck map[string]any    `yaml:"healthcheck"`
		Volumes     []string          `yaml:"volumes"`
		DependsOn   map[string]any    `yaml:"depends_on"`
		Build       map[string]string `yaml:"build"`
	} `yaml:"services"`
}

func loadCompose(t *testing.T) compose {
	t.Helper()
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var c compose
	require.NoError(t, yaml.Unmarshal(b, &c), "docker-compose.yml must parse")
	return c
}

func TestComposeShape(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	for _, name := range []string{"kafka1", "kafka2", "kafka3", "postgres", "hookd-migrate", "hookd-relay", "hookd-router", "hookd-dispatch", "hookd-attempt-log", "prometheus"} {
		require.Contains(t, c.Services, name)
	}
	voters := map[string]bool{}
	for _, k := range []string{"kafka1", "kafka2", "kafka3"} {
		s := c.Services[k]
		require.Equal(t, "broker,controller", s.Environment["KAFKA_PROCESS_ROLES"], "%s runs KRaft", k)
		voters[s.Environment["KAFKA_CONTROLLER_QUORUM_VOTERS"].(string)] = true
		require.NotEmpty(t, s.Healthcheck, "%s needs a healthcheck for compose up --wait", k)
	}
	require.Len(t, voters, 1, "all brokers share one quorum")
	require.Contains(t, strings.Join(c.Services["postgres"].Command, " "), "wal_level=logical")
	for name, s := range c.Services {
		if name == "hookd-migrate" {
			continue
		}
		require.NotEmpty(t, s.Healthcheck, "%s needs a healthcheck for compose up --wait", name)
	}
	for _, v := range c.Services["prometheus"].Volumes {
		host := strings.SplitN(v, ":", 2)[0]
		_, err := os.Stat(filepath.Join("..", host))
		require.NoError(t, err, "prometheus mounts %s", host)
	}
}

// TestComposeUsesRealCommandsAndFlags compares every hookd service's command
// and environment with the hookd binary's own command line.
func TestComposeUsesRealCommandsAndFlags(t *testing.T) {
	t.Parallel()
	model, err := hookdcli.Describe()
	require.NoError(t, err)
	c := loadCompose(t)
	n := 0
	for name, s := range c.Services {
		if !strings.HasPrefix(name, "hookd") {
			continue
		}
		n++
		require.NotEmpty(t, s.Command, name)
		require.True(t, slices.Contains(model.Commands, s.Command[0]), "%s runs 'hookd %s', which is not a hookd command (have %v)", name, s.Command[0], model.Commands)
		env := map[string]string{}
		for k, v := range s.Environment {
			require.True(t, slices.Contains(model.EnvVars, k), "%s sets %s, which no hookd flag reads", name, k)
			env[k] = fmt.Sprint(v)
		}
		checkCommandEnv(t, name, s.Command, env)
		if hc, ok := s.Healthcheck["test"].([]any); ok && len(hc) > 2 && hc[0] == "CMD" {
			require.True(t, slices.Contains(model.Commands, hc[2].(string)), "%s healthcheck runs unknown command %v", name, hc)
		}
	}
	require.GreaterOrEqual(t, n, 5)
}

func TestPrometheusConfigParses(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("prometheus/prometheus.yml")
	require.NoError(t, err)
	var cfg struct {
		ScrapeConfigs []struct {
			JobName     string `yaml:"job_name"`
			MetricsPath string `yaml:"metrics_path"`
			DNSSD       []struct {
				Names []string `yaml:"names"`
			} `yaml:"dns_sd_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	require.NotEmpty(t, cfg.ScrapeConfigs)
	services := loadCompose(t).Services
	for _, sc := range cfg.ScrapeConfigs {
		require.Equal(t, "/metrics", sc.MetricsPath)
		for _, sd := range sc.DNSSD {
			for _, name := range sd.Names {
				require.Contains(t, services, name, "prometheus scrapes %s, which compose does not define", name)
			}
		}
	}
}

// TestDockerfileBuildFlagsGiveAStaticBinary builds hookd with the
// Dockerfile's flags and checks the result needs no dynamic loader (it must
// run on scratch).
func TestDockerfileBuildFlagsGiveAStaticBinary(t *testing.T) {
	t.Parallel()
	df, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "FROM scratch", "USER 65532"} {
		require.Contains(t, string(df), want)
	}
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	require.Contains(t, string(mk), "CGO_ENABLED ?= 0")
	require.Contains(t, string(mk), "-trimpath")

	out := filepath.Join(t.TempDir(), "hookd")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./cmd/hookd")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	f, err := elf.Open(out)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "binary wants a dynamic loader; it would not start on scratch")
	}
}
