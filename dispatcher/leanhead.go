package dispatcher

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http/httputil"
	"strconv"
)

// respHead is what the lean client reads of a response's status line and
// headers: the few it acts on, without a header map.
type respHead struct {
	status     int
	retryAfter string
	close      bool  // the connection ends after this response
	chunked    bool  // Transfer-Encoding: chunked
	length     int64 // Content-Length; -1 when absent
}

var errMalformedResponse = errors.New("malformed HTTP response")

// readHead reads a status line and headers from br, as net/http does for
// the headers it acts on: Content-Length (repeated only with one value),
// Transfer-Encoding (chunked or nothing), Connection (close, keep-alive
// for HTTP/1.0) and Retry-After.
func readHead(br *bufio.Reader) (respHead, error) {
	line, err := readLine(br)
	if err != nil {
		return respHead{}, err
	}
	h := respHead{length: -1}
	var http10 bool
	switch {
	case len(line) < 12 || line[8] != ' ':
		return h, fmt.Errorf("%w: status line %q", errMalformedResponse, line)
	case bytes.HasPrefix(line, []byte("HTTP/1.1")):
	case bytes.HasPrefix(line, []byte("HTTP/1.0")):
		http10 = true
	default:
		return h, fmt.Errorf("%w: status line %q", errMalformedResponse, line)
	}
	if len(line) > 12 && line[12] != ' ' {
		return h, fmt.Errorf("%w: status line %q", errMalformedResponse, line)
	}
	h.status = 0
	for _, b := range line[9:12] {
		if b < '0' || b > '9' {
			return h, fmt.Errorf("%w: status line %q", errMalformedResponse, line)
		}
		h.status = h.status*10 + int(b-'0')
	}
	if h.status < 100 {
		return h, fmt.Errorf("%w: status line %q", errMalformedResponse, line)
	}
	keepAlive := false
	for {
		line, err := readLine(br)
		if err != nil {
			return h, err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // a folded continuation: of no header read here
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return h, fmt.Errorf("%w: header line %q", errMalformedResponse, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseUint(string(value), 10, 63)
			if err != nil || h.length >= 0 && int64(n) != h.length {
				return h, fmt.Errorf("%w: Content-Length %q", errMalformedResponse, value)
			}
			h.length = int64(n)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(value, []byte("chunked")) || h.chunked {
				return h, fmt.Errorf("%w: unsupported Transfer-Encoding %q", errMalformedResponse, value)
			}
			h.chunked = true
		case bytes.EqualFold(name, []byte("Connection")):
			for tok := range bytes.SplitSeq(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				h.close = h.close || bytes.EqualFold(tok, []byte("close"))
				keepAlive = keepAlive || bytes.EqualFold(tok, []byte("keep-alive"))
			}
		case bytes.EqualFold(name, []byte("Retry-After")):
			h.retryAfter = string(value)
		}
	}
	if h.chunked {
		h.length = -1 // Transfer-Encoding wins over Content-Length
	}
	h.close = h.close || http10 && !keepAlive
	if noBody(h.status) {
		h.length, h.chunked = 0, false
	}
	return h, nil
}

// noBody reports whether a response with status has no body.
func noBody(status int) bool {
	return status < 200 || status == 204 || status == 304
}

// readLine returns the next line of br without its line end. The line is
// only valid until the next read. Of a line longer than br's buffer, only
// the start is returned (enough for the name of a header, the rest is
// skipped); the connection's header limit still bounds it.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		if len(line) > 0 && line[0] != ' ' && line[0] != '\t' && !bytes.Contains(line, []byte(":")) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", errMalformedResponse, br.Size())
		}
		start := append([]byte(nil), line...) // the buffer is refilled below
		for err == bufio.ErrBufferFull {
			_, err = br.ReadSlice('\n')
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return start, nil
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return bytes.TrimSuffix(line[:len(line)-1], []byte("\r")), nil
}

// lengthBody reads a Content-Length body: io.EOF only at its end.
type lengthBody struct {
	r *bufio.Reader
	n int64
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.r.Read(p)
	b.n -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF // the connection ended before the body
	}
	return n, err
}

// chunkedBody reads a chunked body and, at its end, its trailers.
type chunkedBody struct {
	r  *bufio.Reader
	cr io.Reader
}

func (b *chunkedBody) Read(p []byte) (int, error) {
	n, err := b.cr.Read(p)
	if err != io.EOF {
		return n, err
	}
	for {
		line, err := readLine(b.r)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return n, err
		}
		if len(line) == 0 {
			return n, io.EOF
		}
	}
}

// body returns the reader of h's body from br.
func (h respHead) body(br *bufio.Reader) io.Reader {
	switch {
	case h.chunked:
		return &chunkedBody{r: br, cr: httputil.NewChunkedReader(br)}
	case h.length >= 0:
		return &lengthBody{r: br, n: h.length}
	}
	return br // until the connection ends
}
