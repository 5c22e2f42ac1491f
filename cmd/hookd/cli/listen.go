package cli

import (
	"fmt"
	"time"

	"github.com/hookd/hookd/api"
)

// ListenFlags are the defences of --listen, which the portal makes
// customer-facing: timeouts that close idle and slow connections, and caps
// on the connections open at once, so that no client can hold the server
// or take the file descriptors deliveries need.
type ListenFlags struct {
	ListenMaxConns          int           `name:"listen-max-conns" default:"1024" env:"HOOKD_LISTEN_MAX_CONNS" help:"Connections open at once on --listen; beyond it new ones are closed on accept (hookd_http_connections_refused_total)."`
	ListenMaxConnsPerClient int           `name:"listen-max-conns-per-client" default:"64" env:"HOOKD_LISTEN_MAX_CONNS_PER_CLIENT" help:"Connections open at once from one client address (IPv4 address, IPv6 /64) on --listen; at most --listen-max-conns. Behind a reverse proxy every connection comes from the proxy."`
	ListenReadTimeout       time.Duration `name:"listen-read-timeout" default:"30s" env:"HOOKD_LISTEN_READ_TIMEOUT" help:"Longest time to read one request on --listen, body included."`
	ListenWriteTimeout      time.Duration `name:"listen-write-timeout" default:"60s" env:"HOOKD_LISTEN_WRITE_TIMEOUT" help:"Longest time from a request's headers to the end of its response on --listen (pprof profiles extend it by their duration)."`
	ListenIdleTimeout       time.Duration `name:"listen-idle-timeout" default:"120s" env:"HOOKD_LISTEN_IDLE_TIMEOUT" help:"Close a keep-alive connection on --listen idle this long; keep it above a load balancer's idle timeout."`
}

func (f ListenFlags) validate() error {
	switch {
	case f.ListenMaxConns < 1:
		return fmt.Errorf("--listen-max-conns: must be at least 1, got %d", f.ListenMaxConns)
	case f.ListenMaxConnsPerClient < 1 || f.ListenMaxConnsPerClient > f.ListenMaxConns:
		return fmt.Errorf("--listen-max-conns-per-client: must be 1..%d (--listen-max-conns), got %d", f.ListenMaxConns, f.ListenMaxConnsPerClient)
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--listen-read-timeout", f.ListenReadTimeout}, {"--listen-write-timeout", f.ListenWriteTimeout}, {"--listen-idle-timeout", f.ListenIdleTimeout}} {
		if d.v < time.Millisecond {
			return fmt.Errorf("%s: must be at least 1ms, got %s", d.flag, d.v)
		}
	}
	return nil
}

func (f ListenFlags) apply(c api.Config) api.Config {
	c.MaxConns, c.MaxConnsPerClient = f.ListenMaxConns, f.ListenMaxConnsPerClient
	c.ReadTimeout, c.WriteTimeout, c.IdleTimeout = f.ListenReadTimeout, f.ListenWriteTimeout, f.ListenIdleTimeout
	return c
}
