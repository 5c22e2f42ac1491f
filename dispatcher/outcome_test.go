package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/attempt"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	ra := 600 * time.Second
	dialTimeout := &net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}
	for _, tc := range []struct {
		name         string
		status       int
		err          error
		retryAfter   time.Duration
		clientErrors int
		want         dispatcher.Verdict
	}{
		{"200", 200, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeDelivered, Breaker: dispatcher.BreakerSuccess}},
		{"204 resets 4xx strikes", 204, nil, 0, 2, dispatcher.Verdict{Outcome: attempt.OutcomeDelivered, Breaker: dispatcher.BreakerSuccess}},
		{"299", 299, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeDelivered, Breaker: dispatcher.BreakerSuccess}},
		{"302 is a failure", 302, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP3xx, Breaker: dispatcher.BreakerFailure}},
		{"304", 304, nil, 0, 1, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP3xx, Breaker: dispatcher.BreakerFailure}},
		{"408 retries", 408, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP408, Breaker: dispatcher.BreakerFailure}},
		{"429 with Retry-After", 429, nil, ra, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP429, RetryAfter: ra, Breaker: dispatcher.BreakerFailure}},
		{"429 does not count as a 4xx strike", 429, nil, 0, 2, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP429, Breaker: dispatcher.BreakerFailure}},
		{"410 gone", 410, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeGone, ErrorClass: dispatcher.ClassHTTP410, Breaker: dispatcher.BreakerSuccess, DeadReason: deadletter.ReasonEndpointGone}},
		{"404 first strike", 404, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP4xx, ClientErrors: 1, Breaker: dispatcher.BreakerSuccess}},
		{"400 second strike", 400, nil, 0, 1, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP4xx, ClientErrors: 2, Breaker: dispatcher.BreakerSuccess}},
		{"422 third strike is permanent", 422, nil, 0, 2, dispatcher.Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: dispatcher.ClassHTTP4xx, ClientErrors: 3, Breaker: dispatcher.BreakerSuccess, DeadReason: deadletter.ReasonClientError}},
		{"401 and 403 count too", 403, nil, 0, 2, dispatcher.Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: dispatcher.ClassHTTP4xx, ClientErrors: 3, Breaker: dispatcher.BreakerSuccess, DeadReason: deadletter.ReasonClientError}},
		{"500", 500, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP5xx, Breaker: dispatcher.BreakerFailure}},
		{"503 with Retry-After, resets strikes", 503, nil, ra, 2, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTP5xx, RetryAfter: ra, Breaker: dispatcher.BreakerFailure}},
		{"Retry-After ignored on a 2xx", 200, nil, ra, 0, dispatcher.Verdict{Outcome: attempt.OutcomeDelivered, Breaker: dispatcher.BreakerSuccess}},
		{"status 600", 600, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTPInvalid, Breaker: dispatcher.BreakerFailure}},
		{"status 101", 101, nil, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassHTTPInvalid, Breaker: dispatcher.BreakerFailure}},
		{"deadline", 0, fmt.Errorf("post: %w", context.DeadlineExceeded), 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassTimeout, Breaker: dispatcher.BreakerFailure}},
		{"connect timeout", 0, fmt.Errorf("post: %w", dialTimeout), 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassConnectTimeout, Breaker: dispatcher.BreakerFailure}},
		{"refused", 0, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassConnectRefused, Breaker: dispatcher.BreakerFailure}},
		{"reset", 0, fmt.Errorf("read: %w", io.ErrUnexpectedEOF), 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassConnReset, Breaker: dispatcher.BreakerFailure}},
		{"dns", 0, &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassDNS, Breaker: dispatcher.BreakerFailure}},
		{"other network", 0, errors.New("boom"), 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: dispatcher.ClassNetwork, Breaker: dispatcher.BreakerFailure}},
		{"ssrf", 0, fmt.Errorf("dial: %w", &ssrf.RefusedError{Class: ssrf.ClassLoopback}), 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomeRefused, ErrorClass: dispatcher.ClassSSRF, DeadReason: deadletter.ReasonSSRFRefused}},
		{"circuit open", 0, dispatcher.ErrCircuitOpen, 0, 1, dispatcher.Verdict{Outcome: attempt.OutcomeCircuitOpen, ErrorClass: dispatcher.ClassCircuitOpen}},
		{"invalid url", 0, fmt.Errorf("%w: x", dispatcher.ErrInvalidURL), 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: dispatcher.ClassInvalidURL, DeadReason: deadletter.ReasonInvalidURL}},
		{"invalid secret", 0, dispatcher.ErrInvalidSecret, 0, 0, dispatcher.Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: dispatcher.ClassInvalidSecret, DeadReason: deadletter.ReasonInvalidSecret}},
	} {
		got := dispatcher.Classify(tc.status, tc.err, tc.retryAfter, tc.clientErrors)
		require.Equal(t, tc.want, got, tc.name)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
