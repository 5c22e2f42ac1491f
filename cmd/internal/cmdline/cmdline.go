// Package cmdline parses hookd's and hookctl's command lines the same way:
// kong with compact help, the variables their flag defaults share
// (${retry_schedule}), the Kafka TLS and SASL flags both read
// (KafkaSecurityFlags, so hookctl need not link the daemon), one-line parse
// errors and the exit codes. It never runs a command.
//
// Internal: only hookd's own packages can import it.
package cmdline

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/hookd/hookd/retrytiers"
)

// Exit codes of both binaries.
const (
	ExitOK      = 0
	ExitFailure = 1 // the command ran and failed
	ExitUsage   = 2 // bad flags or input, or a dependency unreachable at start-up
)

// New builds the kong parser of grammar. exit receives the code of a run
// that parsing ends itself (--help); nil means kong's default (os.Exit).
// extra options come last (kong.ExplicitGroups to title flags tagged
// group:"key", which are listed after a command's own; SharedFlagsOnce).
func New(grammar any, name, description string, stdout, stderr io.Writer, exit func(int), extra ...kong.Option) (*kong.Kong, error) {
	opts := []kong.Option{
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Vars{"retry_schedule": retrytiers.DefaultSchedule},
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
	}
	if exit != nil {
		opts = append(opts, kong.Exit(exit))
	}
	return kong.New(grammar, append(opts, extra...)...)
}

// Parse parses args into grammar. When done is true the run is over with
// code: help was printed (0), or a one-line error was (ExitUsage or
// ExitFailure); otherwise kctx is ready to run.
func Parse(grammar any, name, description string, args []string, stdout, stderr io.Writer, extra ...kong.Option) (kctx *kong.Context, code int, done bool) {
	exitCode := -1
	parser, err := New(grammar, name, description, stdout, stderr, func(code int) { exitCode = code }, extra...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return nil, ExitFailure, true
	}
	kctx, err = parser.Parse(args)
	if exitCode >= 0 { // --help or similar
		return nil, exitCode, true
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v (see %s --help)\n", name, err, commandPath(name, err))
		return nil, ExitUsage, true
	}
	return kctx, ExitOK, false
}

// commandPath names the (sub)command a parse error is about, e.g.
// "hookctl tokens create", so the error points at that command's help.
func commandPath(name string, err error) string {
	var pe *kong.ParseError
	if !errors.As(err, &pe) || pe.Context == nil {
		return name
	}
	words := []string{name}
	for _, p := range pe.Context.Path {
		if p.Command != nil {
			words = append(words, p.Command.Name)
		}
	}
	return strings.Join(words, " ")
}

// SharedFlagsOnce is a help printer for flags every command shares (those
// in the groups named by keys): the top-level help lists them after the
// commands, and a command's help leaves them out and says where they are,
// so that neither starts with dozens of lines the reader did not ask for.
func SharedFlagsOnce(keys ...string) kong.Option {
	return kong.Help(func(options kong.HelpOptions, ctx *kong.Context) error {
		if ctx.Selected() == nil {
			options.FlagsLast = true
			return kong.DefaultHelpPrinter(options, ctx)
		}
		var hidden []*kong.Flag
		for _, f := range ctx.Model.Flags {
			if f.Group != nil && slices.Contains(keys, f.Group.Key) && !f.Hidden {
				f.Hidden = true
				hidden = append(hidden, f)
			}
		}
		defer func() {
			for _, f := range hidden {
				f.Hidden = false
			}
		}()
		if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
			return err
		}
		if len(hidden) > 0 {
			_, err := fmt.Fprintf(ctx.Stdout, "\nConnection and Kafka flags (%s, ...) apply to every command; %q lists them.\n",
				sharedNames(hidden, 3), ctx.Model.Name+" --help")
			return err
		}
		return nil
	})
}

// sharedNames is the first n of flags as "--name" words.
func sharedNames(flags []*kong.Flag, n int) string {
	names := make([]string, 0, n)
	for _, f := range flags[:min(n, len(flags))] {
		names = append(names, "--"+f.Name)
	}
	return strings.Join(names, ", ")
}
