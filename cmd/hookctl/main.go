// Command hookctl is hookd's operator tool. See `hookctl --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	hookctlcli "github.com/hookd/hookd/cmd/hookctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	os.Exit(hookctlcli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
