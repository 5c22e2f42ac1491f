package chaos

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClusterConfig configures a Cluster of hookd processes.
type ClusterConfig struct {
	// Bin is the hookd binary. Required.
	Bin string
	// DatabaseURL is the Postgres database. Required.
	DatabaseURL string
	// Dir holds the broker's data and every process's log. Required.
	Dir string
	// Partitions of the hookd topics. Defaults to 6.
	Partitions int
	// RetrySchedule is --retry-schedule. Defaults to "1s,2s,4s".
	RetrySchedule string
	// Dispatchers is how many `hookd dispatch` processes run. Defaults to 3.
	Dispatchers int
	// RequestTimeout is the dispatchers' --request-timeout. Defaults to 2s.
	RequestTimeout time.Duration
	// Slot is the relay's replication slot (cluster-wide: unique per run).
	// Defaults to a name derived from the time.
	Slot string
	// DispatchArgs are extra flags of every dispatcher.
	DispatchArgs []string
	// LogLevel of every process. Defaults to "info".
	LogLevel string
	// Env is added to every process's environment (KEY=value), for
	// example SSL_CERT_FILE to trust a test CA. Defaults to none.
	Env []string
	// RelayDatabaseURL is the relay's database when the application's
	// outbox lives on another database or server than hookd's store
	// (migrated too, by Migrate). Defaults to DatabaseURL.
	RelayDatabaseURL string
	// AllInOne runs one `hookd run` (every role and the embedded broker,
	// persisted in Dir, in one process named RoleRun) instead of a broker
	// and a process per role: the deployment a kill -9 takes down whole.
	// Dispatchers is then ignored and DispatchArgs go to `hookd run`.
	// Defaults to false.
	AllInOne bool
}

func (c *ClusterConfig) setDefaults() {
	if c.Partitions == 0 {
		c.Partitions = 6
	}
	if c.RetrySchedule == "" {
		c.RetrySchedule = "1s,2s,4s"
	}
	if c.Dispatchers == 0 {
		c.Dispatchers = 3
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 2 * time.Second
	}
	if c.Slot == "" {
		c.Slot = fmt.Sprintf("hookd_chaos_%d", time.Now().UnixNano())
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
}

// Cluster runs `hookd broker` and each role as its own process, or (with
// AllInOne) one `hookd run`.
type Cluster struct {
	cfg       ClusterConfig
	KafkaAddr string

	mu      sync.Mutex
	procs   map[string]*Proc
	listens map[string]string
	// Restarts counts kill -9 / stop and restarts per process name.
	restarts map[string]int
	// exits are the unexpected exits of processes since replaced.
	exits []error
}

// Role names of the processes.
const (
	RoleBroker     = "broker"
	RoleRelay      = "relay"
	RoleRouter     = "router"
	RoleAttemptLog = "attempt-log"
	// RoleRun is the one `hookd run` process of an AllInOne cluster.
	RoleRun = "run"
)

// DispatcherName is the process name of dispatcher i.
func DispatcherName(i int) string { return "dispatch-" + strconv.Itoa(i) }

// NewCluster prepares a cluster; Start starts it.
func NewCluster(cfg ClusterConfig) (*Cluster, error) {
	cfg.setDefaults()
	if cfg.Bin == "" || cfg.DatabaseURL == "" || cfg.Dir == "" {
		return nil, errors.New("chaos: ClusterConfig needs Bin, DatabaseURL and Dir")
	}
	if cfg.AllInOne && cfg.RelayDatabaseURL != "" && cfg.RelayDatabaseURL != cfg.DatabaseURL {
		return nil, errors.New("chaos: RelayDatabaseURL needs a relay process of its own, not AllInOne")
	}
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	return &Cluster{cfg: cfg, KafkaAddr: addr, procs: map[string]*Proc{}, listens: map[string]string{}, restarts: map[string]int{}}, nil
}

// Config returns the cluster's configuration with defaults applied.
func (c *Cluster) Config() ClusterConfig { return c.cfg }

// Start migrates the schema, then starts the broker, the attempt-log
// writer, the router, the dispatchers and the relay, each ready before the
// next.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.Migrate(ctx); err != nil {
		return err
	}
	if c.cfg.AllInOne {
		return c.StartProcess(ctx, RoleRun)
	}
	names := []string{RoleBroker, RoleAttemptLog, RoleRouter}
	for i := range c.cfg.Dispatchers {
		names = append(names, DispatcherName(i))
	}
	names = append(names, RoleRelay)
	for _, n := range names {
		if err := c.StartProcess(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// Migrate runs `hookd migrate` (idempotent) on the store's database and,
// when it is another one, on the relay's.
func (c *Cluster) Migrate(ctx context.Context) error {
	if err := c.migrate(ctx, "migrate", c.cfg.DatabaseURL); err != nil {
		return err
	}
	if u := c.cfg.RelayDatabaseURL; u != "" && u != c.cfg.DatabaseURL {
		return c.migrate(ctx, "migrate-relay", u)
	}
	return nil
}

func (c *Cluster) migrate(ctx context.Context, name, dbURL string) error {
	mctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	p, err := StartProc(name, c.cfg.Bin, c.cfg.Env, c.logPath(name), "migrate", "--database-url", dbURL)
	if err != nil {
		return err
	}
	select {
	case <-p.Done():
		if p.err != nil {
			return fmt.Errorf("hookd migrate: %v\n%s", p.err, p.Tail())
		}
	case <-mctx.Done():
		p.Kill9()
		return errors.New("hookd migrate did not finish within 60s")
	}
	return nil
}

func (c *Cluster) logPath(name string) string { return filepath.Join(c.cfg.Dir, name+".log") }

// LogDir is where every process's stderr is kept.
func (c *Cluster) LogDir() string { return c.cfg.Dir }

func (c *Cluster) args(name string) ([]string, error) {
	if name == RoleBroker {
		return []string{"broker", "--data-dir", filepath.Join(c.cfg.Dir, "kafka"), "--kafka-listen", c.KafkaAddr}, nil
	}
	listen := c.listens[name]
	if listen == "" {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		listen = a
		c.listens[name] = listen
	}
	role := name
	if strings.HasPrefix(name, "dispatch-") {
		role = "dispatch"
	}
	dbURL := c.cfg.DatabaseURL
	if role == RoleRelay && c.cfg.RelayDatabaseURL != "" {
		dbURL = c.cfg.RelayDatabaseURL
	}
	args := []string{"--log-level", c.cfg.LogLevel, role,
		"--database-url", dbURL, "--no-migrate",
		"--partitions", strconv.Itoa(c.cfg.Partitions), "--retry-schedule", c.cfg.RetrySchedule,
		"--listen", listen}
	if role == RoleRun {
		// The embedded broker on the cluster's Kafka address, so that the
		// harness's clients find it again after a restart.
		args = append(args, "--data-dir", filepath.Join(c.cfg.Dir, "data"), "--kafka-listen", c.KafkaAddr)
	} else {
		args = append(args, "--brokers", c.KafkaAddr, "--replication-factor", "1", "--min-insync-replicas", "1")
	}
	if role == "relay" || role == RoleRun {
		args = append(args, "--relay-slot", c.cfg.Slot)
	}
	if role == "dispatch" {
		// Static group members, as the Kubernetes manifest runs them: a
		// dispatcher restarted after a kill takes its old place.
		args = append(args, "--instance-id", name)
	}
	if role == "dispatch" || role == RoleRun {
		args = append(args, "--allow-private-networks", "--request-timeout", c.cfg.RequestTimeout.String(),
			"--connect-timeout", "1s")
		args = append(args, c.cfg.DispatchArgs...)
	}
	return args, nil
}

// StartProcess starts (or restarts after a kill) the process name and
// waits until it is ready.
func (c *Cluster) StartProcess(ctx context.Context, name string) error {
	c.mu.Lock()
	if p := c.procs[name]; p != nil {
		if !p.Exited() {
			c.mu.Unlock()
			return fmt.Errorf("%s already running", name)
		}
		// A process that exited by itself and is started again is still
		// reported by Unexpected.
		if err := p.UnexpectedExit(); err != nil {
			c.exits = append(c.exits, fmt.Errorf("%w\n%s", err, lastLines(p.Tail(), 20)))
		}
	}
	args, err := c.args(name)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	p, err := StartProc(name, c.cfg.Bin, c.cfg.Env, c.logPath(name), args...)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	p.Listen = c.listens[name]
	c.procs[name] = p
	c.mu.Unlock()
	if name == RoleBroker {
		return WaitTCP(ctx, c.KafkaAddr, 60*time.Second)
	}
	return p.WaitReady(ctx, 90*time.Second)
}

// Proc returns the current process of name (nil if never started).
func (c *Cluster) Proc(name string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[name]
}

// Kill9 kills name with SIGKILL.
func (c *Cluster) Kill9(name string) {
	if p := c.Proc(name); p != nil {
		p.Kill9()
	}
	c.mu.Lock()
	c.restarts[name]++
	c.mu.Unlock()
}

// Stop stops name with SIGTERM (SIGKILL after timeout).
func (c *Cluster) Stop(name string, timeout time.Duration) error {
	p := c.Proc(name)
	if p == nil {
		return nil
	}
	p.markKilled()
	c.mu.Lock()
	c.restarts[name]++
	c.mu.Unlock()
	return p.Stop(timeout)
}

// NoteFault counts a fault the cluster did not inject itself (a Postgres
// restart) in Kills.
func (c *Cluster) NoteFault(name string) {
	c.mu.Lock()
	c.restarts[name]++
	c.mu.Unlock()
}

// Restart9 kills name with SIGKILL and starts it again.
func (c *Cluster) Restart9(ctx context.Context, name string) error {
	c.Kill9(name)
	return c.StartProcess(ctx, name)
}

// Freeze stops name with SIGSTOP (see Proc.Freeze); Thaw resumes it.
func (c *Cluster) Freeze(name string) error {
	p := c.Proc(name)
	if p == nil {
		return fmt.Errorf("%s not started", name)
	}
	return p.Freeze()
}

// Thaw resumes name with SIGCONT.
func (c *Cluster) Thaw(name string) error {
	p := c.Proc(name)
	if p == nil {
		return fmt.Errorf("%s not started", name)
	}
	return p.Thaw()
}

// Kills returns how many times each process was killed or stopped.
func (c *Cluster) Kills() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.restarts {
		out[k] = v
	}
	return out
}

// Names returns the names of the processes started so far.
func (c *Cluster) Names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for n := range c.procs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Unexpected returns an error for every process that exited by itself,
// including those started again since.
func (c *Cluster) Unexpected() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := append([]error(nil), c.exits...)
	for _, p := range c.procs {
		if err := p.UnexpectedExit(); err != nil {
			errs = append(errs, fmt.Errorf("%w\n%s", err, lastLines(p.Tail(), 20)))
		}
	}
	return errors.Join(errs...)
}

// Close stops every process: SIGTERM, SIGKILL after a few seconds.
func (c *Cluster) Close() {
	c.mu.Lock()
	procs := make([]*Proc, 0, len(c.procs))
	for n, p := range c.procs {
		if n != RoleBroker {
			procs = append(procs, p)
		}
	}
	broker := c.procs[RoleBroker]
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		if !p.Exited() {
			wg.Go(func() {
				p.markKilled()
				_ = p.Stop(5 * time.Second)
			})
		}
	}
	wg.Wait()
	if broker != nil && !broker.Exited() {
		_ = c.Stop(RoleBroker, 5*time.Second)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
