package dispatcher

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readHead and the body readers read what http.ReadResponse reads: the
// same status, Retry-After, connection end and body, or an error for both.
func TestReadHeadAsNetHTTP(t *testing.T) {
	t.Parallel()
	raws := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 503 Busy\r\nretry-after: 120 \r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nX-Trailer: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n1\r\nz\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.0 200 OK\r\n\r\nuntil the end",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		"HTTP/1.1 200 OK\r\n\r\nno length",
		"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Security-Policy: " + strings.Repeat("p", 10000) + "\r\nContent-Length: 2\r\n\r\nok",
	}
	for _, raw := range raws {
		want, werr := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
		require.NoError(t, werr, raw)
		wantBody, _ := io.ReadAll(want.Body)
		br := bufio.NewReaderSize(strings.NewReader(raw), 4096) // as a lean connection's
		h, err := readHead(br)
		require.NoError(t, err, raw)
		body, err := io.ReadAll(h.body(br))
		require.NoError(t, err, raw)
		require.Equal(t, want.StatusCode, h.status, raw)
		require.Equal(t, want.Header.Get("Retry-After"), h.retryAfter, raw)
		require.Equal(t, want.Close || want.ContentLength < 0 && len(want.TransferEncoding) == 0, h.close || !h.chunked && h.length < 0, raw)
		require.Equal(t, string(wantBody), string(body), raw)
		rest, _ := io.ReadAll(br)
		require.Empty(t, rest, "read to the end of the response: %q", raw)
	}
	bad := []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
	}
	for _, raw := range bad {
		_, werr := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
		require.Error(t, werr, raw)
		_, err := readHead(bufio.NewReader(strings.NewReader(raw)))
		require.ErrorIs(t, err, errMalformedResponse, raw)
	}
	// Only HTTP/1.x is spoken on these connections.
	_, err := readHead(bufio.NewReader(strings.NewReader("HTTP/2.0 200 OK\r\n\r\n")))
	require.ErrorIs(t, err, errMalformedResponse)

	// A body the connection cuts short is an error, not its end.
	br := bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"))
	h, err := readHead(br)
	require.NoError(t, err)
	_, err = io.ReadAll(h.body(br))
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}
