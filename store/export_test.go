package store

import "time"

// RenderWindowsAlways makes s write every attempt batch with the
// statements for batches holding several attempts of one delivery.
func RenderWindowsAlways(s *Store) { s.windowsAlways = true }

// LatencyHist exposes latencyHist to the tests.
type LatencyHist = latencyHist

// Percentile is latencyHist.percentile.
func (h latencyHist) Percentile(p float64) time.Duration { return h.percentile(p) }
