package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/alecthomas/kong"

	"github.com/hookd/hookd/cmd/internal/cmdline"
)

// HealthcheckCmd probes a running hookd's /readyz; it is the container
// healthcheck of images that have no shell or curl.
type HealthcheckCmd struct {
	Listen  string        `name:"listen" default:"127.0.0.1:8080" env:"HOOKD_LISTEN" help:"The --listen address of the hookd to probe."`
	Timeout time.Duration `name:"timeout" default:"3s" help:"How long to wait for an answer."`
}

// Run implements `hookd healthcheck`.
func (c *HealthcheckCmd) Run(ctx context.Context, stdout io.Writer) error {
	addr := c.Listen
	if strings.HasPrefix(addr, "0.0.0.0:") || strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1:" + addr[strings.LastIndex(addr, ":")+1:]
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return usage(fmt.Errorf("listen: %q: %w", c.Listen, err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: %s %s", resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintln(stdout, strings.TrimSpace(string(body)))
	return nil
}

// APICmd runs only the HTTP surface (health, metrics, API) against Postgres
// and Kafka, with no delivery role. Its endpoint limits must match the
// dispatchers': it refuses what they would cap.
type APICmd struct {
	DaemonFlags
	EndpointLimitFlags
}

// Run implements `hookd api`.
func (c *APICmd) Run(ctx context.Context, logger *slog.Logger) error {
	if err := c.EndpointLimitFlags.validate(); err != nil {
		return usage(err)
	}
	return runRoles(ctx, logger, "api", c.DaemonFlags, &c.EndpointLimitFlags)
}

// Model describes the hookd command line for tests and docs: every command
// path and every environment variable a flag reads.
type Model struct {
	Commands []string
	EnvVars  []string
}

// Describe returns the Model of the hookd CLI.
func Describe() (Model, error) {
	var cli CLI
	parser, err := cmdline.New(&cli, "hookd", description, io.Discard, io.Discard, nil)
	if err != nil {
		return Model{}, err
	}
	var m Model
	seen := map[string]bool{}
	var walk func(n *kong.Node, path string)
	walk = func(n *kong.Node, path string) {
		for _, f := range n.Flags {
			for _, e := range f.Envs {
				if !seen[e] {
					seen[e] = true
					m.EnvVars = append(m.EnvVars, e)
				}
			}
		}
		for _, child := range n.Children {
			p := strings.TrimSpace(path + " " + child.Name)
			m.Commands = append(m.Commands, p)
			walk(child, p)
		}
	}
	walk(parser.Model.Node, "")
	return m, nil
}
