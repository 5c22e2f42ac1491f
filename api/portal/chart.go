package portal

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"time"

	"github.com/hookd/hookd/internal/endpoint"
	"github.com/hookd/hookd/store"
)

// Charts are drawn on the server as inline SVG: the portal's CSP allows no
// script and no inline style, so the geometry is computed here and the
// colours come from classes in portal.css (CSS variables, so both colour
// schemes read). Each bar has a <title> (its values on hover), each SVG a
// role="img" and an aria-label with the totals, and a table below holds
// the numbers for readers that do not see the picture.

// Chart geometry, in SVG user units (the SVG scales to its box).
const (
	chartW      = 720.0
	chartH      = 170.0
	chartLeft   = 56.0 // room for the y axis labels
	chartRight  = 8.0
	chartTop    = 10.0
	chartBottom = 22.0 // room for the x axis labels
	plotW       = chartW - chartLeft - chartRight
	plotH       = chartH - chartTop - chartBottom
	// chartXTicks is about how many x labels are drawn.
	chartXTicks = 6
)

// chartBar is one bucket's bars: a stacked pair (counts) or an overlaid
// pair (latency: p99 behind, p50 in front).
type chartBar struct {
	X, W float64
	// Y1/H1 is the lower (delivered, p99) bar, Y2/H2 the upper or inner
	// one (failed, p50).
	Y1, H1, Y2, H2 float64
	// X2, W2 place the second bar: the same as X, W for a stack, narrower
	// and centred for latency's p50.
	X2, W2 float64
	Title  string
}

// chartTick is an axis label at X (x axis) or Y (y axis, with a grid line).
type chartTick struct {
	X, Y  float64
	Label string
}

// svgChart is one drawn chart.
type svgChart struct {
	// Kind is "counts" or "latency" (the CSS classes of its bars).
	Kind  string
	Label string
	Bars  []chartBar
	XTick []chartTick
	YTick []chartTick
	Empty bool
	// The plot's frame, for the grid lines, the hit areas and the empty
	// note (from the chart* constants).
	Left, Right, Top, PlotH, MidX, MidY, W, H float64
}

func newSVGChart(kind string, empty bool) svgChart {
	return svgChart{Kind: kind, Empty: empty, Left: chartLeft, Right: chartW - chartRight, Top: chartTop, PlotH: plotH,
		MidX: chartLeft + plotW/2, MidY: chartTop + plotH/2, W: chartW, H: chartH}
}

// chartView is the chart section of the endpoint and endpoints pages.
type chartView struct {
	// Window is 24h, 7d or 30d; Step "hour" or "day".
	Window, Step string
	Buckets      []store.ChartBucket
	Delivered    int64
	Failed       int64
	Counts       template.HTML
	Latency      template.HTML
	// Rows are the buckets with attempts, for the table.
	Rows []store.ChartBucket
	zone *time.Location
}

// chartBounds are the bucket edges of a window ending with the bucket that
// holds now: hours for 24h and 7d, days in the reader's zone for 30d.
func chartBounds(window string, now time.Time, loc *time.Location) ([]time.Time, string) {
	now = now.In(loc)
	if window == "30d" {
		end := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, loc)
		b := make([]time.Time, 31)
		for i := range b {
			b[i] = end.AddDate(0, 0, i-30)
		}
		return b, "day"
	}
	n := 24
	if window == "7d" {
		n = 7 * 24
	}
	// Hours on the absolute clock, so a zone with a 30 min offset still
	// gets n equal buckets; labels are local.
	end := now.Truncate(time.Hour).Add(time.Hour)
	b := make([]time.Time, n+1)
	for i := range b {
		b[i] = end.Add(time.Duration(i-n) * time.Hour)
	}
	return b, "hour"
}

// chartFor reads and draws the charts of endpoints ids over window.
func (h *Handler) chartFor(ctx context.Context, account string, ids []string, window string, loc *time.Location) (*chartView, error) {
	bounds, step := chartBounds(window, h.now(), loc)
	p := store.PortalChartParams{Account: account, EndpointIDs: ids, Bounds: bounds}
	if step == "day" {
		p.Zone = loc
	}
	buckets, err := h.store().PortalChart(ctx, p)
	if err != nil {
		return nil, err
	}
	return newChartView(window, step, buckets, loc)
}

func newChartView(window, step string, buckets []store.ChartBucket, loc *time.Location) (*chartView, error) {
	v := &chartView{Window: window, Step: step, Buckets: buckets, zone: loc}
	for _, b := range buckets {
		v.Delivered += b.Delivered
		v.Failed += b.Failed
		if b.Delivered+b.Failed > 0 {
			v.Rows = append(v.Rows, b)
		}
	}
	var err error
	if v.Counts, err = drawSVG(countsChart(v)); err != nil {
		return nil, err
	}
	if v.Latency, err = drawSVG(latencyChart(v)); err != nil {
		return nil, err
	}
	return v, nil
}

// BucketLabel is a bucket's start as the table shows it.
func (v *chartView) BucketLabel(b store.ChartBucket) string {
	if v.Step == "day" {
		return b.Start.In(v.zone).Format("Mon 2 Jan")
	}
	return b.Start.In(v.zone).Format("Mon 2 Jan 15:04")
}

// Span names the window in words ("last 24 hours").
func (v *chartView) Span() string { return v.span() }

func (v *chartView) span() string {
	return map[string]string{"24h": "last 24 hours", "7d": "last 7 days", "30d": "last 30 days"}[v.Window]
}

func countsChart(v *chartView) svgChart {
	c := newSVGChart("counts", v.Delivered+v.Failed == 0)
	c.Label = fmt.Sprintf("Attempts per %s, %s: %d delivered, %d failed", v.Step, v.span(), v.Delivered, v.Failed)
	var most int64
	for _, b := range v.Buckets {
		most = max(most, b.Delivered+b.Failed)
	}
	top := niceCeil(float64(most))
	c.YTick = yTicks(top, func(f float64) string { return fmt.Sprintf("%.0f", f) })
	c.XTick = xTicks(v)
	for i, b := range v.Buckets {
		x, w := slot(i, len(v.Buckets))
		h1 := scale(float64(b.Delivered), top)
		h2 := scale(float64(b.Failed), top)
		c.Bars = append(c.Bars, chartBar{X: x, W: w, Y1: chartTop + plotH - h1, H1: h1, Y2: chartTop + plotH - h1 - h2, H2: h2,
			X2: x, W2: w,
			Title: fmt.Sprintf("%s: %d delivered, %d failed", v.BucketLabel(b), b.Delivered, b.Failed)})
	}
	return c
}

func latencyChart(v *chartView) svgChart {
	c := newSVGChart("latency", v.Delivered+v.Failed == 0)
	var most time.Duration
	for _, b := range v.Buckets {
		most = max(most, b.P99)
	}
	topMS := niceCeil(float64(most.Milliseconds()))
	c.Label = fmt.Sprintf("Latency per %s, %s: p50 and p99, highest p99 %s", v.Step, v.span(), formatMS(most))
	c.YTick = yTicks(topMS, func(f float64) string { return fmt.Sprintf("%.0f ms", f) })
	c.XTick = xTicks(v)
	for i, b := range v.Buckets {
		x, w := slot(i, len(v.Buckets))
		h99 := scale(float64(b.P99.Milliseconds()), topMS)
		h50 := scale(float64(b.P50.Milliseconds()), topMS)
		title := fmt.Sprintf("%s: no requests", v.BucketLabel(b))
		if b.Delivered+b.Failed > 0 {
			title = fmt.Sprintf("%s: p50 %s, p99 %s", v.BucketLabel(b), formatMS(b.P50), formatMS(b.P99))
		}
		// p50 is a narrower bar inside the p99 one.
		c.Bars = append(c.Bars, chartBar{X: x, W: w, Y1: chartTop + plotH - h99, H1: h99, Y2: chartTop + plotH - h50, H2: h50,
			X2: round1(x + w/4), W2: round1(w / 2), Title: title})
	}
	return c
}

func formatMS(d time.Duration) string { return fmt.Sprintf("%d ms", d.Milliseconds()) }

// slot is the x and width of bucket i of n: the plot split evenly, with a
// gap of a fifth of the slot between bars.
func slot(i, n int) (x, w float64) {
	s := plotW / float64(n)
	return round1(chartLeft + float64(i)*s + s*0.1), round1(s * 0.8)
}

// scale is the height of v on a plot whose top is top.
func scale(v, top float64) float64 {
	if top <= 0 || v <= 0 {
		return 0
	}
	return round1(plotH * v / top)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so that the y
// axis reads in round numbers; at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// yTicks are 0, half and the top of the y axis; half only when it is a
// whole number (the labels are counts and whole ms: half of 5 would read
// "2" on the 2.5 line, half of an empty chart's 1 a second "0").
func yTicks(top float64, label func(float64) string) []chartTick {
	out := make([]chartTick, 0, 3)
	for _, f := range []float64{0, 0.5, 1} {
		if v := top * f; v != math.Trunc(v) {
			continue
		}
		out = append(out, chartTick{X: chartLeft - 6, Y: round1(chartTop + plotH - plotH*f), Label: label(top * f)})
	}
	return out
}

// xTicks label about chartXTicks buckets, at their centres.
func xTicks(v *chartView) []chartTick {
	n := len(v.Buckets)
	every := max(1, n/chartXTicks)
	var out []chartTick
	for i := 0; i < n; i += every {
		x, w := slot(i, n)
		t := v.Buckets[i].Start.In(v.zone)
		label := t.Format("15:04")
		if v.Step == "day" || (v.Window == "7d" && t.Hour() == 0) {
			label = t.Format("2 Jan")
		} else if v.Window == "7d" {
			label = t.Format("Mon 15:04")
		}
		out = append(out, chartTick{X: round1(x + w/2), Y: chartH - 6, Label: label})
	}
	return out
}

func round1(f float64) float64 { return math.Round(f*10) / 10 }

// svgTemplate draws an svgChart. html/template escapes every label.
var svgTemplate = template.Must(template.New("svg").Parse(`<svg class="chart {{.Kind}}" viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Label}}" preserveAspectRatio="xMinYMid meet">` +
	`{{$c := .}}{{range .YTick}}<line class="grid" x1="{{$c.Left}}" x2="{{$c.Right}}" y1="{{.Y}}" y2="{{.Y}}"/><text class="axis" x="{{.X}}" y="{{.Y}}" text-anchor="end" dominant-baseline="middle">{{.Label}}</text>{{end}}` +
	`{{range .XTick}}<text class="axis" x="{{.X}}" y="{{.Y}}" text-anchor="middle">{{.Label}}</text>{{end}}` +
	`{{if .Empty}}<text class="axis" x="{{.MidX}}" y="{{.MidY}}" text-anchor="middle">No attempts in this window</text>{{end}}` +
	`{{$k := .Kind}}{{range .Bars}}<g><title>{{.Title}}</title>` +
	`{{if eq $k "counts"}}<rect class="ok" x="{{.X}}" y="{{.Y1}}" width="{{.W}}" height="{{.H1}}"/><rect class="bad" x="{{.X2}}" y="{{.Y2}}" width="{{.W2}}" height="{{.H2}}"/>` +
	`{{else}}<rect class="p99" x="{{.X}}" y="{{.Y1}}" width="{{.W}}" height="{{.H1}}"/><rect class="p50" x="{{.X2}}" y="{{.Y2}}" width="{{.W2}}" height="{{.H2}}"/>{{end}}` +
	`{{/* a full-height hit area, so the title shows over an empty bucket too */}}<rect class="hit" x="{{.X}}" y="{{$c.Top}}" width="{{.W}}" height="{{$c.PlotH}}"/></g>{{end}}` +
	`</svg>`))

func drawSVG(c svgChart) (template.HTML, error) {
	var buf bytes.Buffer
	if err := svgTemplate.Execute(&buf, c); err != nil {
		return "", fmt.Errorf("drawing chart: %w", err)
	}
	return template.HTML(buf.String()), nil // #nosec G203 -- html/template's own escaped output
}

// endpointsView is the endpoints page's data: the account's endpoints and
// the chart of all of them.
type endpointsView struct {
	Rows  []endpointRow
	Chart *chartView
	// Catalog offers the catalogued event types in the New endpoint form
	// (manage links to the whole account only).
	Catalog []catalogChoice
}

// accountChart is the chart of eps (an account's endpoints, or the one of
// an endpoint link) over the request's window (24h by default).
func (h *Handler) accountChart(r *http.Request, account string, eps []endpoint.Endpoint) (*chartView, error) {
	win := r.URL.Query().Get("window")
	if win == "" {
		win = "24h"
	}
	if _, ok := windows[win]; !ok {
		return nil, badInput("window: must be 24h, 7d or 30d, got %q", clip(win))
	}
	ids := make([]string, len(eps))
	for i, e := range eps {
		ids[i] = e.ID
	}
	return h.chartFor(r.Context(), account, ids, win, zoneOf(r))
}
