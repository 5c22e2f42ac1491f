// Command hookd is the webhook delivery daemon. See `hookd --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	hookdcli "github.com/hookd/hookd/cmd/hookd/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once
	}()
	os.Exit(hookdcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
