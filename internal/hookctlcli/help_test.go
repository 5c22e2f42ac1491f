package hookctlcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A command's help shows its own flags first and the shared connection
// flags after them, under their own headings.
func TestHelpListsTheCommandsOwnFlagsFirst(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"tokens", "create", "--help"}, &out, &errOut)
	if code != ExitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	help := out.String()
	own, shared := strings.Index(help, "--account="), strings.Index(help, "--database-url=")
	if own < 0 || shared < 0 || own > shared {
		t.Fatalf("--account (own, at %d) must come before --database-url (shared, at %d):\n%s", own, shared, help)
	}
	for _, heading := range []string{"Connection (every command", "Kafka TLS and SASL (every command)"} {
		if !strings.Contains(help, heading) {
			t.Errorf("help lacks the heading %q", heading)
		}
	}
	firstShared := strings.Index(help, "Connection (every command")
	if n := strings.Count(help[:firstShared], "\n"); n > 16 {
		t.Errorf("the command's own part of the help is %d lines; shared flags must not come first", n)
	}
}

// A parse error names the subcommand's help, not the root's.
func TestParseErrorNamesTheSubcommandsHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"tokens", "create"}, &out, &errOut)
	if code != ExitUsage {
		t.Fatalf("exit %d, want %d", code, ExitUsage)
	}
	if got := errOut.String(); !strings.Contains(got, "(see hookctl tokens create --help)") || strings.Count(got, "\n") != 1 {
		t.Fatalf("stderr %q: want one line that points at hookctl tokens create --help", got)
	}
}
