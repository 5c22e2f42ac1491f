package cli

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
