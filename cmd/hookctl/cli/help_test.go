package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A command's help shows its own flags and names the shared connection
// flags in one line; hookctl --help lists the commands before those flags
// (issue 32: ~45 lines of them came first, and every command repeated them).
func TestHelpListsTheCommandsOwnFlagsFirst(t *testing.T) {
	help := helpOf(t, "tokens", "create", "--help")
	if !strings.Contains(help, "--account=") {
		t.Fatalf("the command's own flags are missing:\n%s", help)
	}
	if strings.Contains(help, "--database-url=") || strings.Contains(help, "--kafka-sasl-password") {
		t.Fatalf("a command's help repeats the shared flags:\n%s", help)
	}
	if !strings.Contains(help, `"hookctl --help" lists them`) {
		t.Fatalf("a command's help must say where the shared flags are:\n%s", help)
	}

	root := helpOf(t, "--help")
	cmds, shared := strings.Index(root, "endpoints add"), strings.Index(root, "--database-url=")
	if cmds < 0 || shared < 0 || cmds > shared {
		t.Fatalf("hookctl --help: the commands (at %d) must come before --database-url (at %d):\n%s", cmds, shared, root)
	}
	for _, heading := range []string{"Connection (every command", "Kafka TLS and SASL (every command)"} {
		if !strings.Contains(root, heading) {
			t.Errorf("hookctl --help lacks the heading %q", heading)
		}
	}
}

func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), args, &out, &errOut); code != ExitOK {
		t.Fatalf("%v: exit %d, stderr %q", args, code, errOut.String())
	}
	return out.String()
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

// --reason means the audit text in every command; the dead-letter reason
// filter is --dlq-reason in list and replay alike (issue: a list command
// pasted into a replay replayed everything).
func TestReasonIsNeverAFilter(t *testing.T) {
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"dlq", "list", "--reason", "retries_exhausted"}, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "--reason") {
		t.Fatalf("dlq list --reason: exit %d, stderr %q; want a usage error", code, errOut.String())
	}
	for _, cmd := range [][]string{{"dlq", "list", "--help"}, {"dlq", "replay", "--help"}} {
		out.Reset()
		if code := Main(context.Background(), cmd, &out, &errOut); code != ExitOK {
			t.Fatalf("%v: exit %d", cmd, code)
		}
		if !strings.Contains(out.String(), "--dlq-reason=") {
			t.Errorf("%v lacks --dlq-reason", cmd)
		}
	}
}
