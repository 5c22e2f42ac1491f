package api

import (
	"crypto/subtle"
	"net/http"
	"net/http/pprof"
)

// mountPprof serves net/http/pprof at /debug/pprof/ (index, named profiles,
// cmdline, profile, symbol, trace). With a token, every request must carry
// it as a bearer token: profiles reveal code paths and heap contents.
func mountPprof(mux *http.ServeMux, token string) {
	guard := func(h http.Handler) http.Handler {
		if token == "" {
			return h
		}
		want := []byte("Bearer " + token)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="hookd"`)
				http.Error(w, "admin token required", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	mux.Handle("/debug/pprof/", guard(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/cmdline", guard(http.HandlerFunc(pprof.Cmdline)))
	mux.Handle("/debug/pprof/profile", guard(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/symbol", guard(http.HandlerFunc(pprof.Symbol)))
	mux.Handle("/debug/pprof/trace", guard(http.HandlerFunc(pprof.Trace)))
}
