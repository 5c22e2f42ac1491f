package router

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkDedupe measures the dedupe state at its steady state under
// load: six partitions holding DedupeMaxKeys (50000) keys each, so every
// new event evicts one; an op is one event checked and, in batches of
// 500 (about the router's transactions at saturation), committed.
//
//	go test -run XXX -bench Dedupe -benchtime 600000x ./producer/router/
func BenchmarkDedupe(b *testing.B) {
	const parts, maxKeys, batch = 6, 50000, 500
	d := &dedupe{window: time.Hour, maxKeys: maxKeys, hash: newHasher(), parts: map[int32]*seen{}}
	for p := range int32(parts) {
		d.parts[p] = newSeen()
	}
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	var p pending
	run := func(from, n int) {
		for i := from; i < from+n; i++ {
			part := int32(i % parts)
			name := dedupeKey("acct_"+strconv.Itoa(i%1000), "evt_"+strconv.Itoa(i))
			d.check(&p, d.parts[part], part, name, t0.Add(time.Duration(i)*time.Millisecond/10))
			if (i+1)%batch == 0 {
				d.commit(&p)
				p.reset()
			}
		}
	}
	run(0, parts*maxKeys) // fill
	b.ReportAllocs()
	b.ResetTimer()
	run(parts*maxKeys, b.N)
}
