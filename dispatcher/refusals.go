package dispatcher

import (
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher/ssrf"
)

// refusalWarnEvery is how often, at most, one endpoint's SSRF refusals are
// logged: one WARN, not one per delivery.
const refusalWarnEvery = 10 * time.Minute

// refusals remembers when the SSRF refusal of each endpoint (id and URL:
// a new URL is warned about at once) was last logged.
type refusals struct {
	mu   sync.Mutex
	last map[string]time.Time // id + " " + url
}

// warn logs one WARN per endpoint and refusalWarnEvery naming the
// endpoint, its account, the URL's host and the refused address.
func (r *refusals) warn(log *slog.Logger, t Target, err error) {
	key := t.ID + " " + t.URL
	now := time.Now()
	r.mu.Lock()
	if last, ok := r.last[key]; ok && now.Sub(last) < refusalWarnEvery {
		r.mu.Unlock()
		return
	}
	r.last[key] = now
	r.mu.Unlock()
	host := ""
	if u, perr := url.Parse(t.URL); perr == nil {
		host = u.Host
	}
	attrs := []any{"endpoint_id", t.ID, "account", t.Account, "host", host}
	var re *ssrf.RefusedError
	if errors.As(err, &re) {
		attrs = append(attrs, "address", re.Addr.String(), "address_class", re.Class)
	} else {
		attrs = append(attrs, "error", err)
	}
	attrs = append(attrs, "dead_letter_reason", deadletter.ReasonSSRFRefused, "repeats_after", refusalWarnEvery)
	log.Warn("webhook destination refused by the SSRF guard; this endpoint's deliveries are dead-lettered", attrs...)
}

// sweep forgets the refusals logged more than refusalWarnEvery ago.
func (r *refusals) sweep(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, t := range r.last {
		if now.Sub(t) >= refusalWarnEvery {
			delete(r.last, k)
		}
	}
}
