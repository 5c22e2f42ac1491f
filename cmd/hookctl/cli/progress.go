package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/hookd/hookd/deadletter/replay"
)

// isTerminal reports whether f is a terminal (on every platform hookctl
// builds for).
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// progressLine draws a replay's progress on a terminal (progressbar), and
// ends its line before anything else is printed.
type progressLine struct {
	out io.Writer
	bar *progressbar.ProgressBar
}

func newProgressLine(out io.Writer) *progressLine { return &progressLine{out: out} }

func (p *progressLine) update(pr replay.Progress) {
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(pr.Total, progressbar.OptionSetWriter(p.out),
			progressbar.OptionSetDescription("replaying"), progressbar.OptionShowCount(),
			progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100_000_000),
			progressbar.OptionSetPredictTime(false))
	}
	if pr.Total != p.bar.GetMax64() {
		p.bar.ChangeMax64(pr.Total)
	}
	p.bar.Describe(fmt.Sprintf("replayed %d, skipped %d", pr.Replayed, pr.Skipped))
	_ = p.bar.Set64(pr.Scanned)
}

// done finishes the bar's line, so what is printed next starts on a line
// of its own. It may be called on nil and more than once.
func (p *progressLine) done() {
	if p == nil || p.bar == nil {
		return
	}
	_ = p.bar.Finish()
	fmt.Fprintln(p.out)
	p.bar = nil
}
