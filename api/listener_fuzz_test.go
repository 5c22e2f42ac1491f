package api

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hookd/hookd/internal/wait"
)

var (
	statusLine = regexp.MustCompile(`(?m)^HTTP/1\.[01] (\d{3}) `)
	echoLen    = regexp.MustCompile(`\{"len":\d+\}`)
)

// FuzzListenerRequest sends arbitrary bytes to a real server on
// 127.0.0.1, through the connection caps, the body limit and the
// timeouts: every answer is below 500 (or one of net/http's own 501 and
// 505 refusals), no body beyond MaxBodyBytes reaches a handler, the server
// closes the connection once the client has finished sending, and the
// connection gives its place under the caps back. Seeds in
// testdata/fuzz/FuzzListenerRequest.
func FuzzListenerRequest(f *testing.F) {
	const limit = 1 << 10
	l := listen(f, Config{ReadHeaderTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, IdleTimeout: 500 * time.Millisecond,
		MaxConns: 4, MaxConnsPerClient: 4, MaxBodyBytes: limit})
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := net.DialTimeout("tcp", l.srv.Addr(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(raw) // the server may close first, refusing the start of it
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		out, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("connection still open 10s after the request %q; read %q", raw, out)
		}
		for _, m := range statusLine.FindAllSubmatch(out, -1) {
			code, _ := strconv.Atoi(string(m[1]))
			if code >= 500 && code != 501 && code != 505 {
				t.Fatalf("%d for %q: %q", code, raw, out)
			}
		}
		for _, m := range echoLen.FindAll(out, -1) {
			var v struct{ Len int }
			if json.Unmarshal(m, &v) == nil && v.Len > limit {
				t.Fatalf("a %d-byte body reached the handler (limit %d) for %q", v.Len, limit, raw)
			}
		}
		c.Close()
		wait.For(t, 10*time.Second, "the connection's place back", func() bool { return l.srv.ln.(*connLimits).open() == 0 })
	})
}
