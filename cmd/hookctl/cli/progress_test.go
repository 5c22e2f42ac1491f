package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hookd/hookd/deadletter/replay"
)

// The summary printed after a replay must start on a line of its own, not
// on the progress bar's line.
func TestProgressLineEndsItsLine(t *testing.T) {
	var out bytes.Buffer
	p := newProgressLine(&out)
	p.update(replay.Progress{Total: 10, Scanned: 4, Replayed: 3, Skipped: 1})
	p.update(replay.Progress{Total: 10, Scanned: 10, Replayed: 9, Skipped: 1})
	p.done()
	p.done() // twice is harmless
	got := out.String()
	if !strings.Contains(got, "10/10") || !strings.Contains(got, "replayed 9, skipped 1") {
		t.Fatalf("progress output %q lacks the final count", got)
	}
	if !strings.HasSuffix(got, "\n") || strings.Count(got, "\n") != 1 {
		t.Fatalf("progress output %q must end with exactly one newline", got)
	}
	var nilBar *progressLine
	nilBar.done() // no bar (not a terminal): nothing to finish
}
