package hookbench

import (
	"context"
	"fmt"
	"time"
)

// OneHost is the one-host phase: many endpoints (one account each) on a
// single receiver host:port, as on a platform that hosts its customers'
// webhooks. Connections and handshakes are counted at the receiver over
// the measured load, after the warm-up.
type OneHost struct {
	Endpoints int     `json:"endpoints"`
	Rate      float64 `json:"offered_events_per_second"`
	WarmupS   float64 `json:"warmup_seconds"`
	// Deliveries are the measured load's deliveries (first 2xx of each
	// event) and Requests every request the receiver answered meanwhile.
	Deliveries int `json:"deliveries"`
	Requests   int `json:"requests"`
	// ConnsOpened, FullHandshakes and ResumedHandshakes are counted over
	// the measured load; the Per1000 figures divide by Deliveries.
	ConnsOpened              int64   `json:"connections_opened"`
	FullHandshakes           int64   `json:"full_tls_handshakes"`
	ResumedHandshakes        int64   `json:"resumed_tls_handshakes"`
	ConnsPer1000             float64 `json:"connections_opened_per_1000_deliveries"`
	FullHandshakesPer1000    float64 `json:"full_tls_handshakes_per_1000_deliveries"`
	ResumedHandshakesPer1000 float64 `json:"resumed_tls_handshakes_per_1000_deliveries"`
	// Unshaken are the measured load's connections without a completed
	// TLS handshake (closed by the client before it, or failed); over
	// https only.
	Unshaken int64 `json:"connections_without_tls_handshake"`
	// WarmupConns and WarmupHandshakes are the warm-up's (full and
	// resumed together).
	WarmupConns      int64 `json:"warmup_connections_opened"`
	WarmupHandshakes int64 `json:"warmup_tls_handshakes"`
	// PeakOpen is the most connections open at once over the phase, and
	// OpenAtEnd those still open when it ended.
	PeakOpen  int64 `json:"peak_open_connections"`
	OpenAtEnd int64 `json:"open_connections_at_end"`
	// Protocols counts every handshake of the phase (warm-up included)
	// by the protocol ALPN settled on; over http, every connection as
	// "http/1.1 (cleartext)".
	Protocols map[string]int64 `json:"handshakes_by_protocol"`
	// P50 and P99 are the measured load's commit-to-receiver latency.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	Lost  int     `json:"lost"`
}

// oneHost starts a fresh stack whose OneHostEndpoints endpoints share
// one receiver, offers OneHostRate for OneHostWarmup (connections are
// opened, sessions cached), then again for Phase, and counts what the
// receiver saw of the second load.
func (b *bench) oneHost(ctx context.Context) error {
	n := b.cfg.OneHostEndpoints
	b.setPhase("one host: %d endpoints, starting hookd", n)
	s, err := b.newStack(ctx, stackParams{endpoints: n, partitions: b.cfg.Partitions, receivers: 1})
	if err != nil {
		return err
	}
	defer s.close()
	b.waitIdle(ctx, s)
	oh := &OneHost{Endpoints: n, Rate: b.cfg.OneHostRate, WarmupS: b.cfg.OneHostWarmup.Seconds()}
	rc, conns := s.receivers[0], s.conns[0]
	if b.cfg.OneHostWarmup > 0 {
		_, _, lost, err := b.runLoad(ctx, s, "onehost_warmup", b.cfg.OneHostRate, b.cfg.OneHostWarmup, 10, nil)
		if err != nil {
			return err
		}
		oh.Lost += lost
	}
	before, reqBefore := conns.snapshot(), rc.Total()
	start := time.Now()
	l, ok, lost, err := b.runLoad(ctx, s, "onehost", b.cfg.OneHostRate, b.cfg.Phase, 10, nil)
	if err != nil {
		return err
	}
	after := conns.snapshot()
	oh.Lost += lost
	pc, lat, times := healthyLatencies(s, l, ok, start, b.cfg.Phase, nil)
	oh.Deliveries, oh.Requests, oh.P50Ms, oh.P99Ms = pc.N, rc.Total()-reqBefore, pc.P50, pc.P99
	oh.count(before, after, b.tls != nil)
	if b.tls == nil {
		oh.Protocols = map[string]int64{"http/1.1 (cleartext)": after.opened}
	}
	b.res.OneHost = oh
	b.res.Lost += oh.Lost
	b.res.Series["onehost"] = series(times, start)
	b.res.cdf[fmt.Sprintf("%d endpoints on one host", n)] = lat
	b.cfg.Logger.Info("hookbench: one host", "endpoints", n, "deliveries", oh.Deliveries,
		"connections_per_1000", oh.ConnsPer1000, "full_handshakes_per_1000", oh.FullHandshakesPer1000,
		"resumed_handshakes_per_1000", oh.ResumedHandshakesPer1000, "protocols", protocolList(oh.Protocols))
	return nil
}

// count fills the connection and handshake figures from the receiver's
// counters before and after the measured load.
func (oh *OneHost) count(before, after connSnapshot, tls bool) {
	oh.ConnsOpened = after.opened - before.opened
	oh.FullHandshakes = after.full - before.full
	oh.ResumedHandshakes = after.resumed - before.resumed
	if tls {
		oh.Unshaken = max(0, oh.ConnsOpened-oh.FullHandshakes-oh.ResumedHandshakes)
	}
	oh.WarmupConns, oh.WarmupHandshakes = before.opened, before.full+before.resumed
	oh.PeakOpen, oh.OpenAtEnd = after.peakOpen, after.opened-after.closed
	oh.Protocols = after.protos
	if oh.Deliveries > 0 {
		per := 1000 / float64(oh.Deliveries)
		oh.ConnsPer1000 = float64(oh.ConnsOpened) * per
		oh.FullHandshakesPer1000 = float64(oh.FullHandshakes) * per
		oh.ResumedHandshakesPer1000 = float64(oh.ResumedHandshakes) * per
	}
}
