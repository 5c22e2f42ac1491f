// Package version holds the hookd version, set at build time with
// -ldflags "-X github.com/hookd/hookd/internal/version.Version=...".
//
// Internal: only hookd's own packages can import it.
package version

// Version is hookd's version; "dev" in a plain `go build`.
var Version = "dev"

// UserAgent is the User-Agent of hookd's webhook requests.
func UserAgent() string { return "hookd/" + Version }
