package portal

import (
	"fmt"
	"html/template"
	"net/http"
	"regexp"
	"strings"
)

// The portal is the operator's product page for their customers: its name,
// accent colour and logo are theirs (Config.Name, AccentColor, LogoURL).
// The page's CSP allows no inline style and images only from the portal's
// own origin or data: URLs, so the colour comes from a small stylesheet of
// its own (/portal/brand.css) and the logo must be a same-origin path or a
// data: image.

var (
	accentRe  = regexp.MustCompile(`^#(?:[0-9a-fA-F]{3}|[0-9a-fA-F]{6})$`)
	dataImage = regexp.MustCompile(`^data:image/(?:png|jpeg|gif|webp|svg\+xml);base64,[A-Za-z0-9+/]+={0,2}$`)
)

// maxLogoURL bounds a data: logo (it is sent in every page).
const maxLogoURL = 64 << 10

// validateBrand checks AccentColor and LogoURL.
func (c *Config) validateBrand() error {
	if c.AccentColor != "" && !accentRe.MatchString(c.AccentColor) {
		return fmt.Errorf("portal accent color: must be #rgb or #rrggbb, got %q", c.AccentColor)
	}
	if c.LogoURL == "" {
		return nil
	}
	switch {
	case len(c.LogoURL) > maxLogoURL:
		return fmt.Errorf("portal logo url: at most %d bytes, got %d", maxLogoURL, len(c.LogoURL))
	case strings.HasPrefix(c.LogoURL, "data:"):
		if !dataImage.MatchString(c.LogoURL) {
			return fmt.Errorf("portal logo url: a data: logo must be data:image/(png|jpeg|gif|webp|svg+xml);base64,<data>")
		}
	case !strings.HasPrefix(c.LogoURL, "/") || strings.HasPrefix(c.LogoURL, "//") || strings.ContainsAny(c.LogoURL, "\\\"'<> "):
		return fmt.Errorf("portal logo url: must be a path on the portal's own origin (/...) or a data: image, got %q", c.LogoURL)
	}
	return nil
}

// logo is LogoURL as a trusted URL for the templates (validated at start).
func (c *Config) logo() template.URL {
	return template.URL(c.LogoURL) //nolint:gosec // validateBrand allows only same-origin paths and data: images
}

// brandCSS serves the accent colour as a stylesheet, for both colour
// schemes; without AccentColor the page does not link it.
func (h *Handler) brandCSS(w http.ResponseWriter, r *http.Request) {
	h.headers(w)
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Header().Set("Cache-Control", "public, max-age=300")
	if h.cfg.AccentColor == "" {
		return
	}
	// A link on an accent background reads in both schemes: the foreground
	// on it is chosen by the colour's lightness.
	fmt.Fprintf(w, ":root { --accent: %s; --accent-fg: %s; }\n", h.cfg.AccentColor, accentForeground(h.cfg.AccentColor))
}

// accentForeground is black or white, whichever reads on accent (#rgb or
// #rrggbb, validated).
func accentForeground(accent string) string {
	hex := strings.TrimPrefix(accent, "#")
	if len(hex) == 3 {
		hex = string([]byte{hex[0], hex[0], hex[1], hex[1], hex[2], hex[2]})
	}
	var r, g, b int
	_, _ = fmt.Sscanf(hex, "%02x%02x%02x", &r, &g, &b)
	if 299*r+587*g+114*b > 150_000 { // perceived brightness above ~0.59
		return "#000000"
	}
	return "#ffffff"
}
