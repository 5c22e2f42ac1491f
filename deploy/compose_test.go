package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// composeHost is the part of docker-compose.yml that decides whether the
// README's host-side steps (kcat, psql, curl with the admin token) reach
// the stack, and whether `down` and `up` keep every stateful service's data.
type composeHost struct {
	Services map[string]struct {
		Environment map[string]any `yaml:"environment"`
		Ports       []string       `yaml:"ports"`
		Volumes     []string       `yaml:"volumes"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func loadComposeHost(t *testing.T) composeHost {
	t.Helper()
	b, err := os.ReadFile("../docker-compose.yml")
	require.NoError(t, err)
	var c composeHost
	require.NoError(t, yaml.Unmarshal(b, &c))
	return c
}

// publishes reports whether ports maps hostPort to containerPort on loopback.
func publishes(ports []string, hostPort, containerPort string) bool {
	for _, p := range ports {
		if p == "127.0.0.1:"+hostPort+":"+containerPort {
			return true
		}
	}
	return false
}

func TestComposeKafkaHasAHostListenerPerBroker(t *testing.T) {
	t.Parallel()
	c := loadComposeHost(t)
	hostAddr := regexp.MustCompile(`HOST://127\.0\.0\.1:(\d+)`)
	for _, k := range []string{"kafka1", "kafka2", "kafka3"} {
		s := c.Services[k]
		adv, _ := s.Environment["KAFKA_ADVERTISED_LISTENERS"].(string)
		m := hostAddr.FindStringSubmatch(adv)
		require.NotNil(t, m, "%s must advertise a HOST listener on 127.0.0.1 (kcat from the host), got %q", k, adv)
		require.Contains(t, adv, "PLAINTEXT://"+k+":9092", "%s still advertises its in-network listener", k)
		listeners, _ := s.Environment["KAFKA_LISTENERS"].(string)
		require.Contains(t, listeners, "HOST://:"+m[1], "%s listens where it advertises", k)
		require.True(t, publishes(s.Ports, m[1], m[1]), "%s publishes its host listener port %s: %v", k, m[1], s.Ports)
	}
	proto, _ := c.Services["kafka1"].Environment["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].(string)
	require.Contains(t, proto, "HOST:PLAINTEXT")
	require.Equal(t, "PLAINTEXT", c.Services["kafka1"].Environment["KAFKA_INTER_BROKER_LISTENER_NAME"])
}

func TestComposePublishesPostgresAndTheAPI(t *testing.T) {
	t.Parallel()
	c := loadComposeHost(t)
	require.True(t, publishes(c.Services["postgres"].Ports, "5433", "5432"), "psql from the host: %v", c.Services["postgres"].Ports)
	require.True(t, publishes(c.Services["hookd-api"].Ports, "8080", "8080"))
	tok, _ := c.Services["hookd-api"].Environment["HOOKD_ADMIN_TOKEN"].(string)
	require.True(t, strings.HasPrefix(tok, "${HOOKD_ADMIN_TOKEN:?"), "the API's admin token comes from the environment and is required, got %q", tok)
}

// TestComposeEncryptsSecretsAtRest: every hookd daemon gets the key that
// encrypts signing secrets, from the environment, required.
func TestComposeEncryptsSecretsAtRest(t *testing.T) {
	t.Parallel()
	c := loadComposeHost(t)
	n := 0
	for name, s := range c.Services {
		if !strings.HasPrefix(name, "hookd") || name == "hookd-migrate" {
			continue
		}
		n++
		key, _ := s.Environment["HOOKD_SECRETS_KEY"].(string)
		require.True(t, strings.HasPrefix(key, "${HOOKD_SECRETS_KEY:?"), "%s: the secrets key comes from the environment and is required, got %q", name, key)
	}
	require.GreaterOrEqual(t, n, 5)
}

func TestComposeStatefulServicesKeepTheirData(t *testing.T) {
	t.Parallel()
	c := loadComposeHost(t)
	want := map[string]string{"postgres": "/var/lib/postgresql/data"}
	for _, k := range []string{"kafka1", "kafka2", "kafka3"} {
		dir, _ := c.Services[k].Environment["KAFKA_LOG_DIRS"].(string)
		if dir == "" {
			dir, _ = c.Services["kafka1"].Environment["KAFKA_LOG_DIRS"].(string)
		}
		require.NotEmpty(t, dir, "%s sets KAFKA_LOG_DIRS", k)
		want[k] = dir
	}
	for svc, dir := range want {
		found := false
		for _, v := range c.Services[svc].Volumes {
			parts := strings.SplitN(v, ":", 3)
			if len(parts) >= 2 && parts[1] == dir {
				_, named := c.Volumes[parts[0]]
				require.True(t, named, "%s mounts %s from %q, which is not a named volume", svc, dir, parts[0])
				found = true
			}
		}
		require.True(t, found, "%s keeps %s in a named volume: %v", svc, dir, c.Services[svc].Volumes)
	}
}

func TestDockerfileHasAWritableDataDir(t *testing.T) {
	t.Parallel()
	df, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	for _, want := range []string{"--chown=65532:65532 /out/var/lib/hookd /var/lib/hookd", "WORKDIR /var/lib/hookd",
		"HOOKD_DATA_DIR=/var/lib/hookd/data"} {
		require.Contains(t, string(df), want)
	}
}
