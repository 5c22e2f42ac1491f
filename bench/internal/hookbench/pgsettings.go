package hookbench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres durability settings hookbench runs under (--postgres). The first
// one given is the headline: every phase runs on it; each further one
// repeats B2 and the saturation phase on fresh databases.
const (
	// PGDurable is what users run: fsync=on, synchronous_commit=on.
	PGDurable = "durable"
	// PGFsyncOff is fsync=off (synchronous_commit stays on): what `make
	// bench` used to run, kept beside the durable figures for comparison.
	PGFsyncOff = "fsync-off"
	// PGAsIs leaves the server's settings alone (a server where hookbench
	// may not run ALTER SYSTEM); the results name what it found.
	PGAsIs = "as-is"
)

// pgModeSettings are the server settings of each mode.
var pgModeSettings = map[string]map[string]string{
	PGDurable:  {"fsync": "on", "synchronous_commit": "on"},
	PGFsyncOff: {"fsync": "off", "synchronous_commit": "on"},
}

// ParsePostgresModes parses --postgres: a comma-separated list of
// durable, fsync-off and as-is, the first the headline.
func ParsePostgresModes(s string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if _, ok := pgModeSettings[m]; !ok && m != PGAsIs {
			return nil, fmt.Errorf("--postgres: unknown setting %q (durable, fsync-off or as-is)", m)
		}
		for _, o := range out {
			if o == m {
				return nil, fmt.Errorf("--postgres: %q given twice", m)
			}
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--postgres: empty")
	}
	return out, nil
}

// pgSettings switches the benchmark server between the modes with ALTER
// SYSTEM and pg_reload_conf() (fsync and synchronous_commit take effect on
// reload) and puts the server's own settings back at the end.
type pgSettings struct {
	base string
	// orig holds, per setting, the ALTER SYSTEM value found at start
	// ("" when postgresql.auto.conf did not set it).
	orig    map[string]string
	changed bool
}

// use puts the server in mode and returns what it reports, e.g.
// "fsync=on, synchronous_commit=on".
func (p *pgSettings) use(ctx context.Context, mode string) (string, error) {
	conn, err := pgx.Connect(ctx, p.base)
	if err != nil {
		return "", fmt.Errorf("connecting to %s: %w", redact(p.base), err)
	}
	defer conn.Close(ctx)
	want := pgModeSettings[mode]
	if want != nil {
		if err := p.apply(ctx, conn, want); err != nil {
			return "", fmt.Errorf("postgres mode %s (needs a superuser; --postgres as-is runs on the server's settings): %w", mode, err)
		}
	}
	// The postmaster passes the reload on to the backends
	// asynchronously: poll until this session sees it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, match, err := currentSettings(ctx, conn, want)
		if err != nil || match {
			return got, err
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("postgres mode %s: the server reports %s after ALTER SYSTEM and reload (set on its command line?)", mode, got)
		}
		if err := pause(ctx, 100*time.Millisecond); err != nil {
			return "", err
		}
	}
}

// currentSettings reports fsync and synchronous_commit and whether they
// are what want says (always true for a nil want).
func currentSettings(ctx context.Context, conn *pgx.Conn, want map[string]string) (string, bool, error) {
	var got []string
	match := true
	for _, name := range []string{"fsync", "synchronous_commit"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return "", false, err
		}
		if want != nil && v != want[name] {
			match = false
		}
		got = append(got, name+"="+v)
	}
	return strings.Join(got, ", "), match, nil
}

func (p *pgSettings) apply(ctx context.Context, conn *pgx.Conn, want map[string]string) error {
	if p.orig == nil {
		p.orig = map[string]string{}
		for name := range want {
			var v string
			err := conn.QueryRow(ctx, `SELECT setting FROM pg_file_settings
				WHERE name = $1 AND sourcefile LIKE '%postgresql.auto.conf' AND applied`, name).Scan(&v)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			p.orig[name] = v
		}
	}
	for name, v := range want {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", name, v)); err != nil {
			return err
		}
	}
	p.changed = true
	_, err := conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// restore puts back the ALTER SYSTEM values found at start.
func (p *pgSettings) restore() {
	if !p.changed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.base)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	for name, v := range p.orig {
		q := "ALTER SYSTEM RESET " + name
		if v != "" {
			q = fmt.Sprintf("ALTER SYSTEM SET %s = %s", name, v)
		}
		_, _ = conn.Exec(ctx, q)
	}
	_, _ = conn.Exec(ctx, "SELECT pg_reload_conf()")
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
