// Package pgcluster runs a throwaway PostgreSQL cluster that a test controls
// itself (initdb, pg_ctl start and stop), for what a shared test server
// cannot do: stop and crash it (the chaos scenarios), or run it with other
// settings (wal_level=replica, to see the relay's error). As root the server
// runs as the postgres user, like scripts/devdb.sh. It is for tests only.
//
// Internal: only hookd's own packages can import it.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// Postgres is a running throwaway cluster.
type Postgres struct {
	Dir  string
	Port int
	bin  string
}

// Config are the cluster's settings.
type Config struct {
	// WalLevel is the wal_level setting. Defaults to "logical".
	WalLevel string
}

// Start initdb's a cluster in a new temp directory and starts it on a free
// 127.0.0.1 port; Close stops and removes it.
func Start(ctx context.Context, cfg Config) (*Postgres, error) {
	if cfg.WalLevel == "" {
		cfg.WalLevel = "logical"
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(dirs) == 0 {
		return nil, errors.New("no PostgreSQL server under /usr/lib/postgresql")
	}
	sort.Strings(dirs)
	pg := &Postgres{bin: dirs[len(dirs)-1]}
	dir, err := os.MkdirTemp("", "hookd-pg-")
	if err != nil {
		return nil, err
	}
	pg.Dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	pg.Port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(dir, "data")
	if out, err := pg.as(ctx, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8"); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	conf := fmt.Sprintf("\nlisten_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nwal_level = %s\n"+
		"max_replication_slots = 20\nmax_wal_senders = 20\nmax_connections = 300\nfsync = off\ncheckpoint_timeout = 30s\n", pg.Port, dir, cfg.WalLevel)
	f, err := os.OpenFile(filepath.Join(data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	_, _ = f.WriteString(conf)
	f.Close()
	return pg, pg.Start(ctx)
}

func (pg *Postgres) as(ctx context.Context, prog string, args ...string) ([]byte, error) {
	path := filepath.Join(pg.bin, prog)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, path, args...)
	}
	return cmd.CombinedOutput()
}

// URL is the connection string of the postgres database.
func (pg *Postgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.Port)
}

// Start starts the server and waits for it.
func (pg *Postgres) Start(ctx context.Context) error {
	out, err := pg.as(ctx, "pg_ctl", "-D", filepath.Join(pg.Dir, "data"), "-l", filepath.Join(pg.Dir, "server.log"), "-w", "-t", "60", "start")
	if err != nil {
		return fmt.Errorf("pg_ctl start: %v\n%s", err, out)
	}
	return nil
}

// Stop stops the server; mode is smart, fast or immediate (immediate is a
// crash: no checkpoint, recovery on the next start).
func (pg *Postgres) Stop(ctx context.Context, mode string) error {
	out, err := pg.as(ctx, "pg_ctl", "-D", filepath.Join(pg.Dir, "data"), "-m", mode, "-w", "-t", "60", "stop")
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	return nil
}

// Close stops the server and removes its directory.
func (pg *Postgres) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = pg.Stop(ctx, "immediate")
	_ = os.RemoveAll(pg.Dir)
}
