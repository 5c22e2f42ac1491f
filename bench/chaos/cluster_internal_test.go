package chaos

import (
	"slices"
	"testing"
)

// The relay streams from RelayDatabaseURL when it is set (the outbox in
// the application's database); every other role keeps DatabaseURL.
func TestClusterArgsRelayDatabase(t *testing.T) {
	c, err := NewCluster(ClusterConfig{Bin: "hookd", DatabaseURL: "postgres://store/db", Dir: t.TempDir(),
		RelayDatabaseURL: "postgres://app/db"})
	if err != nil {
		t.Fatal(err)
	}
	for role, want := range map[string]string{RoleRelay: "postgres://app/db", RoleRouter: "postgres://store/db",
		RoleAttemptLog: "postgres://store/db", DispatcherName(0): "postgres://store/db"} {
		args, err := c.args(role)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.Index(args, "--database-url")
		if i < 0 || i+1 >= len(args) || args[i+1] != want {
			t.Errorf("%s: args %q, want --database-url %s", role, args, want)
		}
	}
	if _, err := NewCluster(ClusterConfig{Bin: "hookd", DatabaseURL: "postgres://store/db", Dir: t.TempDir(),
		RelayDatabaseURL: "postgres://app/db", AllInOne: true}); err == nil {
		t.Error("AllInOne with a separate relay database: no error")
	}
}
