package portal

import (
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // the zones work in a scratch image without /usr/share/zoneinfo
)

// Times a person reads: every page shows how long ago (or how soon)
// something happened, with the exact time on hover in the zone the reader
// chose. The zone is a cookie (zoneCookie), set from the footer's select
// and remembered for a year; everything is rendered on the server (the
// pages run no script).

// zoneCookie holds the reader's time zone name.
const zoneCookie = "hookd_tz"

// zoneChoices are the footer select's zones: UTC first, then a zone per
// region most customers are in. Any IANA name is accepted by the handler.
var zoneChoices = []string{"UTC", "America/Los_Angeles", "America/Denver", "America/Chicago", "America/New_York",
	"America/Sao_Paulo", "Europe/London", "Europe/Berlin", "Europe/Helsinki", "Africa/Johannesburg", "Asia/Dubai",
	"Asia/Kolkata", "Asia/Singapore", "Asia/Shanghai", "Asia/Tokyo", "Australia/Sydney", "Pacific/Auckland"}

// zoneOf is the reader's zone: the cookie's, or UTC.
func zoneOf(r *http.Request) *time.Location {
	if r == nil {
		return time.UTC
	}
	c, err := r.Cookie(zoneCookie)
	if err != nil {
		return time.UTC
	}
	name, err := url.QueryUnescape(c.Value)
	if err != nil {
		return time.UTC
	}
	if loc, err := loadZone(name); err == nil {
		return loc
	}
	return time.UTC
}

// loadZone is time.LoadLocation for names a reader may pick: IANA names
// only (no "Local", no paths).
func loadZone(name string) (*time.Location, error) {
	if name == "" || name == "Local" || len(name) > 64 || strings.Contains(name, "..") {
		return nil, fmt.Errorf("unknown time zone %q", name)
	}
	return time.LoadLocation(name)
}

// readerClock is what a page needs to show times: now and the reader's zone.
type readerClock struct {
	now  time.Time
	zone *time.Location
}

// Zone is the reader's zone name (the footer's select).
func (v view) Zone() string { return v.clock.zoneName() }

// Zones are the footer's choices, with the reader's own among them.
func (v view) Zones() []string {
	if z := v.clock.zoneName(); !slices.Contains(zoneChoices, z) {
		return append([]string{z}, zoneChoices...)
	}
	return zoneChoices
}

// When renders t as a <time> element: relative text, the exact time in the
// reader's zone on hover, the UTC instant for machines.
func (v view) When(t time.Time) template.HTML {
	if t.IsZero() {
		return "never"
	}
	return template.HTML(fmt.Sprintf(`<time datetime="%s" title="%s">%s</time>`, //nolint:gosec // only formatted times
		formatTime(t), v.clock.exact(t), relative(v.clock.now, t)))
}

// WhenP is When of a time that may be missing.
func (v view) WhenP(t *time.Time) template.HTML {
	if t == nil {
		return "—"
	}
	return v.When(*t)
}

func (c readerClock) zoneName() string {
	if c.zone == nil {
		return "UTC"
	}
	return c.zone.String()
}

// exact is t in the reader's zone, to the second, with the zone's name.
func (c readerClock) exact(t time.Time) string {
	if c.zone == nil || c.zone == time.UTC {
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return t.In(c.zone).Format("2006-01-02 15:04:05 MST") + " (" + c.zone.String() + ")"
}

// relative is t as a person says it from now: "just now", "3 min ago",
// "in 2 h", "5 days ago"; a month or more away, the date.
func relative(now, t time.Time) string {
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 45*time.Second:
		return "just now"
	case d < 90*time.Minute:
		s = fmt.Sprintf("%d min", max(1, int(d.Round(time.Minute)/time.Minute)))
	case d < 36*time.Hour:
		s = fmt.Sprintf("%d h", int(d.Round(time.Hour)/time.Hour))
	case d < 30*24*time.Hour:
		s = fmt.Sprintf("%d days", int(d.Round(24*time.Hour)/(24*time.Hour)))
	default:
		return t.UTC().Format("2006-01-02")
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// setZone remembers the reader's zone (the footer's form) and goes back to
// the page it came from. A GET: it changes a display preference, nothing
// of the account's.
func (h *Handler) setZone(w http.ResponseWriter, r *http.Request) {
	h.headers(w)
	name := r.URL.Query().Get("tz")
	if _, err := loadZone(name); err != nil {
		h.fail(w, r, badInput("time zone: %q is not an IANA time zone name (like Europe/Berlin)", name))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: zoneCookie, Value: url.QueryEscape(name), Path: "/portal/",
		MaxAge: 365 * 24 * 3600, HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil})
	back, ok := safeNext(r.URL.Query().Get("back"))
	if !ok {
		back = "/portal/"
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}
