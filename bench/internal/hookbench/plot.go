package hookbench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// A 3x5 pixel font, drawn at scale 2: enough for axis labels and legends
// without a plotting or font dependency.
var glyphs = map[rune][5]string{
	'0': {"###", "#.#", "#.#", "#.#", "###"}, '1': {".#.", "##.", ".#.", ".#.", "###"},
	'2': {"###", "..#", "###", "#..", "###"}, '3': {"###", "..#", "###", "..#", "###"},
	'4': {"#.#", "#.#", "###", "..#", "..#"}, '5': {"###", "#..", "###", "..#", "###"},
	'6': {"###", "#..", "###", "#.#", "###"}, '7': {"###", "..#", ".#.", ".#.", ".#."},
	'8': {"###", "#.#", "###", "#.#", "###"}, '9': {"###", "#.#", "###", "..#", "###"},
	'.': {"...", "...", "...", "...", ".#."}, '%': {"#.#", "..#", ".#.", "#..", "#.#"},
	'/': {"..#", "..#", ".#.", "#..", "#.."}, '-': {"...", "...", "###", "...", "..."},
	'+': {"...", ".#.", "###", ".#.", "..."}, '(': {".#.", "#..", "#..", "#..", ".#."},
	')': {".#.", "..#", "..#", "..#", ".#."}, ' ': {"...", "...", "...", "...", "..."},
	'_': {"...", "...", "...", "...", "###"}, ':': {"...", ".#.", "...", ".#.", "..."},
	'a': {"###", "#.#", "###", "#.#", "#.#"}, 'b': {"##.", "#.#", "##.", "#.#", "##."},
	'c': {"###", "#..", "#..", "#..", "###"}, 'd': {"##.", "#.#", "#.#", "#.#", "##."},
	'e': {"###", "#..", "##.", "#..", "###"}, 'f': {"###", "#..", "##.", "#..", "#.."},
	'g': {"###", "#..", "#.#", "#.#", "###"}, 'h': {"#.#", "#.#", "###", "#.#", "#.#"},
	'i': {"###", ".#.", ".#.", ".#.", "###"}, 'j': {"..#", "..#", "..#", "#.#", "###"},
	'k': {"#.#", "#.#", "##.", "#.#", "#.#"}, 'l': {"#..", "#..", "#..", "#..", "###"},
	'm': {"#.#", "###", "###", "#.#", "#.#"}, 'n': {"##.", "#.#", "#.#", "#.#", "#.#"},
	'o': {"###", "#.#", "#.#", "#.#", "###"}, 'p': {"###", "#.#", "###", "#..", "#.."},
	'q': {"###", "#.#", "#.#", "###", "..#"}, 'r': {"##.", "#.#", "##.", "#.#", "#.#"},
	's': {"###", "#..", "###", "..#", "###"}, 't': {"###", ".#.", ".#.", ".#.", ".#."},
	'u': {"#.#", "#.#", "#.#", "#.#", "###"}, 'v': {"#.#", "#.#", "#.#", "#.#", ".#."},
	'w': {"#.#", "#.#", "###", "###", "#.#"}, 'x': {"#.#", "#.#", ".#.", "#.#", "#.#"},
	'y': {"#.#", "#.#", ".#.", ".#.", ".#."}, 'z': {"###", "..#", ".#.", "#..", "###"},
}

type canvas struct {
	img *image.RGBA
	// plot area
	x0, y0, x1, y1 int
}

var palette = []color.RGBA{{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}}

func newCanvas(w, h int) *canvas {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 255
	}
	return &canvas{img: img, x0: 70, y0: 30, x1: w - 20, y1: h - 50}
}

func (c *canvas) text(x, y int, s string, col color.RGBA) {
	const scale = 2
	for _, r := range strings.ToLower(s) {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs[' ']
		}
		for row := range 5 {
			for colI := range 3 {
				if g[row][colI] == '#' {
					for dy := range scale {
						for dx := range scale {
							c.img.SetRGBA(x+colI*scale+dx, y+row*scale+dy, col)
						}
					}
				}
			}
		}
		x += 4 * scale
	}
}

func (c *canvas) line(xa, ya, xb, yb int, col color.RGBA) {
	dx, dy := math.Abs(float64(xb-xa)), math.Abs(float64(yb-ya))
	steps := int(math.Max(dx, dy)) + 1
	for i := 0; i <= steps; i++ {
		t := float64(i) / float64(steps)
		x := int(math.Round(float64(xa) + t*float64(xb-xa)))
		y := int(math.Round(float64(ya) + t*float64(yb-ya)))
		c.img.SetRGBA(x, y, col)
		c.img.SetRGBA(x, y+1, col)
	}
}

func (c *canvas) axes(xmax, ymax float64, xlabel, ylabel string, xfmt func(float64) string) {
	grey := color.RGBA{200, 200, 200, 255}
	black := color.RGBA{0, 0, 0, 255}
	for i := 0; i <= 5; i++ {
		y := c.y1 - (c.y1-c.y0)*i/5
		c.line(c.x0, y, c.x1, y, grey)
		c.text(4, y-5, short(ymax*float64(i)/5), black)
		x := c.x0 + (c.x1-c.x0)*i/5
		c.line(x, c.y0, x, c.y1, grey)
		c.text(x-10, c.y1+8, xfmt(xmax*float64(i)/5), black)
	}
	c.line(c.x0, c.y1, c.x1, c.y1, black)
	c.line(c.x0, c.y0, c.x0, c.y1, black)
	c.text((c.x0+c.x1)/2-len(xlabel)*4, c.y1+28, xlabel, black)
	c.text(c.x0, 8, ylabel, black)
}

func short(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func (c *canvas) legend(names []string) {
	for i, n := range names {
		col := palette[i%len(palette)]
		y := c.y0 + 6 + i*16
		for dx := range 14 {
			for dy := range 8 {
				c.img.SetRGBA(c.x1-260+dx, y+dy, col)
			}
		}
		c.text(c.x1-240, y-1, n, color.RGBA{0, 0, 0, 255})
	}
}

func (c *canvas) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return png.Encode(f, c.img)
}

// writeLinePlot plots per-second deliveries of each series against time.
func writeLinePlot(path string, series map[string][]float64, names []string) error {
	c := newCanvas(1000, 520)
	xmax, ymax := 1.0, 1.0
	for _, s := range series {
		xmax = math.Max(xmax, float64(len(s)))
		for _, v := range s {
			ymax = math.Max(ymax, v)
		}
	}
	ymax *= 1.1
	c.axes(xmax, ymax, "seconds since the phase started", "deliveries per second", func(v float64) string { return fmt.Sprintf("%.0f", v) })
	for i, n := range names {
		s := series[n]
		col := palette[i%len(palette)]
		for j := 1; j < len(s); j++ {
			xa := c.x0 + int(float64(j-1)/xmax*float64(c.x1-c.x0))
			xb := c.x0 + int(float64(j)/xmax*float64(c.x1-c.x0))
			ya := c.y1 - int(s[j-1]/ymax*float64(c.y1-c.y0))
			yb := c.y1 - int(s[j]/ymax*float64(c.y1-c.y0))
			c.line(xa, ya, xb, yb, col)
		}
	}
	c.legend(names)
	return c.save(path)
}

// writeCDF plots the latency CDF of each distribution, milliseconds on a
// log scale from 1 ms.
func writeCDF(path string, cdf map[string][]float64) error {
	c := newCanvas(1000, 520)
	names := make([]string, 0, len(cdf))
	maxMs := 10.0
	for n, v := range cdf {
		names = append(names, n)
		for _, x := range v {
			maxMs = math.Max(maxMs, x)
		}
	}
	sort.Strings(names)
	lmax := math.Log10(maxMs)
	c.axes(lmax, 100, "latency ms (log scale)", "% of deliveries at or below", func(v float64) string { return short(math.Pow(10, v)) })
	for i, n := range names {
		v := slices.Clone(cdf[n])
		slices.Sort(v)
		col := palette[i%len(palette)]
		px, py := -1, -1
		for j, x := range v {
			lx := math.Max(0, math.Log10(math.Max(x, 1)))
			xx := c.x0 + int(lx/lmax*float64(c.x1-c.x0))
			yy := c.y1 - int(float64(j+1)/float64(len(v))*float64(c.y1-c.y0))
			if px >= 0 {
				c.line(px, py, xx, yy, col)
			}
			px, py = xx, yy
		}
	}
	c.legend(names)
	return c.save(path)
}
