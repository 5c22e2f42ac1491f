// Command hookd is the webhook delivery daemon. See `hookd --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	hookdcli "github.com/hookd/hookd/cmd/hookd/cli"
)

// defaultGCPercent is the garbage collector's target (GOGC) unless the
// environment sets GOGC: hookd's heap is mostly short-lived (records,
// requests, batches), so collecting at twice the live heap rather than Go's
// default of once costs it half the collector's CPU for a larger peak heap
// (issue 15: docs/benchmarks.md). GOMEMLIMIT caps the heap as usual.
const defaultGCPercent = 200

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once
	}()
	os.Exit(hookdcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
