package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/api"
	"github.com/hookd/hookd/cmd/hookd/internal/daemon"
	"github.com/hookd/hookd/internal/kafkaconn"
	"github.com/hookd/hookd/internal/kafkatest"
	"github.com/hookd/hookd/internal/pgtest"
	"github.com/hookd/hookd/internal/proctest"
	"github.com/hookd/hookd/internal/topics"
	"github.com/hookd/hookd/internal/wait"
	"github.com/hookd/hookd/store"
)

type roleFunc struct {
	name string
	run  func(ctx context.Context) error
}

func (r roleFunc) Name() string                  { return r.name }
func (r roleFunc) Run(ctx context.Context) error { return r.run(ctx) }

func role(name string, run func(ctx context.Context) error) daemon.RoleFactory {
	return func(context.Context, *daemon.Env) (daemon.Role, error) { return roleFunc{name, run}, nil }
}

func config(t *testing.T) daemon.Config {
	t.Helper()
	db := pgtest.New(t)
	k := kafkatest.New(t)
	return daemon.Config{
		Kafka:    kafkaconn.Config{Brokers: k.Addrs},
		Postgres: store.Config{DatabaseURL: db.URL},
		Topics:   topics.Config{Partitions: 2, ReplicationFactor: 1, MinInsyncReplicas: 1},
		HTTP:     api.Config{Listen: fmt.Sprintf("127.0.0.1:%d", proctest.FreePort(t))},
	}
}

// blocker runs until ctx ends and reports that it was stopped.
func blocker(stopped chan<- struct{}) daemon.RoleFactory {
	return role("blocker", func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return nil
	})
}

func run(t *testing.T, ctx context.Context, roles ...daemon.RoleFactory) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, config(t), slog.New(slog.NewTextHandler(io.Discard, nil)), roles) }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("daemon.Run did not return")
		return nil
	}
}

// A role that returns nil before shutdown is a failure of the process:
// the process stops (its other roles drain) and says which role stopped,
// instead of running on without it while reporting ready.
func TestRoleReturningEarlyStopsTheProcess(t *testing.T) {
	stopped := make(chan struct{})
	err := run(t, context.Background(), blocker(stopped), role("quitter", func(context.Context) error { return nil }))
	require.ErrorIs(t, err, daemon.ErrRoleStopped)
	require.ErrorContains(t, err, "quitter")
	select {
	case <-stopped:
	default:
		t.Fatal("the other role was not stopped")
	}
}

func TestRoleErrorStopsTheProcess(t *testing.T) {
	stopped := make(chan struct{})
	boom := errors.New("boom")
	err := run(t, context.Background(), blocker(stopped), role("failing", func(context.Context) error { return boom }))
	require.ErrorIs(t, err, boom)
	require.ErrorContains(t, err, "failing: boom")
	<-stopped
}

func TestShutdownDrainsRolesAndReturnsNil(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	started := role("starter", func(ctx context.Context) error { cancel(); <-ctx.Done(); return nil })
	require.NoError(t, run(t, ctx, blocker(stopped), started))
	<-stopped
}

// readierRole is a role with a readiness of its own (as the relay has).
type readierRole struct {
	roleFunc
	err atomic.Pointer[error]
}

func (r *readierRole) Ready(context.Context) error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

// A running role that says it is not ready (a stalled relay) makes
// /readyz answer 503 with its name and reason under "roles", and 200 again
// once it is ready.
func TestRoleReadinessIsInReadyz(t *testing.T) {
	cfg := config(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &readierRole{roleFunc: roleFunc{"relay", func(ctx context.Context) error { <-ctx.Done(); return nil }}}
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)),
			[]daemon.RoleFactory{func(context.Context, *daemon.Env) (daemon.Role, error) { return r, nil }})
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + cfg.HTTP.Listen + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait.For(t, 30*time.Second, "/readyz 200", func() bool { code, _ := readyz(); return code == http.StatusOK })
	stalled := errors.New("stalled: no progress for 2m1s while rows wait")
	r.err.Store(&stalled)
	code, body := readyz()
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"roles":"relay: stalled: no progress for 2m1s while rows wait"`)
	r.err.Store(nil)
	code, body = readyz()
	require.Equal(t, http.StatusOK, code, body)
}
