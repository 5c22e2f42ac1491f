package dispatcher

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher/ssrf"
	"github.com/hookd/hookd/internal/attempt"
)

// Error classes recorded with attempts and dead letters.
const (
	ClassHTTP3xx         = "http_3xx"        // a redirect, not followed
	ClassHTTP408         = "http_408"        // request timeout
	ClassHTTP410         = "http_410"        // gone: the endpoint is disabled
	ClassHTTP429         = "http_429"        // too many requests
	ClassHTTP4xx         = "http_4xx"        // another 4xx: the receiver's verdict
	ClassHTTP5xx         = "http_5xx"        // server error
	ClassHTTPInvalid     = "http_invalid"    // a status outside 200-599
	ClassTimeout         = "timeout"         // the request exceeded its timeout
	ClassConnectTimeout  = "connect_timeout" // the TCP connect exceeded its timeout
	ClassConnectRefused  = "connect_refused" // nothing listens
	ClassConnReset       = "connection_reset"
	ClassDNS             = "dns_error"
	ClassTLS             = "tls_error"
	ClassNetwork         = "network_error"
	ClassSSRF            = "ssrf_refused"   // the destination address is forbidden
	ClassCircuitOpen     = "circuit_open"   // the endpoint's breaker is open
	ClassInvalidURL      = "invalid_url"    // the endpoint URL cannot be requested
	ClassInvalidSecret   = "invalid_secret" // a signing secret is not whsec_<base64>
	ClassBacklogFull     = "backlog_full"   // deferred: the endpoint's backlog is full
	ClassFairShare       = "fair_share"     // deferred: its account, at its share, crowded a filling partition
	ClassDisabled        = "endpoint_disabled"
	ClassDeleted         = "endpoint_deleted"
	ClassAccountMismatch = "account_mismatch" // the record's account is not the endpoint's: never sent
)

// Sentinel errors of attempts that never reached the network.
var (
	ErrCircuitOpen   = errors.New("circuit breaker open")
	ErrInvalidURL    = errors.New("endpoint url cannot be requested")
	ErrInvalidSecret = errors.New("endpoint signing secret cannot be used")
)

// maxClientErrors is the 3-strikes rule: that many consistent 4xx answers
// (other than 408, 410 and 429) dead-letter a delivery.
const maxClientErrors = 3

// BreakerEffect is how an attempt counts for the endpoint's breaker.
type BreakerEffect int

// Breaker effects.
const (
	BreakerIgnore  BreakerEffect = iota // no request, or not the endpoint's fault
	BreakerSuccess                      // the endpoint answered (2xx, or a 4xx verdict)
	BreakerFailure                      // 5xx, 408, 429, 3xx, timeout, network error
)

// Verdict is what one attempt came to.
type Verdict struct {
	Outcome attempt.Outcome
	// ErrorClass is empty for a delivered attempt.
	ErrorClass string
	// ClientErrors is the count of consistent 4xx answers after this attempt.
	ClientErrors int
	// RetryAfter is the receiver's hint (429, 503, ...), zero if none.
	RetryAfter time.Duration
	Breaker    BreakerEffect
	// DeadReason is set for outcomes that dead-letter at once.
	DeadReason string
}

// Classify turns the result of one attempt into a verdict. status is the
// HTTP status (0 if no response), err the error of the attempt (nil if a
// response arrived), retryAfter the parsed Retry-After of the response and
// clientErrors the count of consistent 4xx answers before this attempt. It
// is pure: no clock, no I/O.
func Classify(status int, err error, retryAfter time.Duration, clientErrors int) Verdict {
	if err != nil {
		v := Verdict{Outcome: attempt.OutcomeRetry, Breaker: BreakerFailure}
		switch {
		case errors.Is(err, ssrf.ErrRefused):
			v = Verdict{Outcome: attempt.OutcomeRefused, ErrorClass: ClassSSRF, DeadReason: deadletter.ReasonSSRFRefused}
		case errors.Is(err, ErrCircuitOpen):
			v = Verdict{Outcome: attempt.OutcomeCircuitOpen, ErrorClass: ClassCircuitOpen}
		case errors.Is(err, ErrInvalidURL):
			v = Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: ClassInvalidURL, DeadReason: deadletter.ReasonInvalidURL}
		case errors.Is(err, ErrInvalidSecret):
			v = Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: ClassInvalidSecret, DeadReason: deadletter.ReasonInvalidSecret}
		default:
			v.ErrorClass = networkClass(err)
		}
		return v
	}
	switch {
	case status >= 200 && status <= 299:
		return Verdict{Outcome: attempt.OutcomeDelivered, Breaker: BreakerSuccess}
	case status >= 300 && status <= 399:
		return Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: ClassHTTP3xx, Breaker: BreakerFailure}
	case status == 408:
		return Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: ClassHTTP408, RetryAfter: retryAfter, Breaker: BreakerFailure}
	case status == 429:
		return Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: ClassHTTP429, RetryAfter: retryAfter, Breaker: BreakerFailure}
	case status == 410:
		return Verdict{Outcome: attempt.OutcomeGone, ErrorClass: ClassHTTP410, Breaker: BreakerSuccess,
			DeadReason: deadletter.ReasonEndpointGone}
	case status >= 400 && status <= 499:
		n := clientErrors + 1
		if n >= maxClientErrors {
			return Verdict{Outcome: attempt.OutcomePermanent, ErrorClass: ClassHTTP4xx, ClientErrors: n,
				Breaker: BreakerSuccess, DeadReason: deadletter.ReasonClientError}
		}
		return Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: ClassHTTP4xx, ClientErrors: n, Breaker: BreakerSuccess}
	case status >= 500 && status <= 599:
		return Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: ClassHTTP5xx, RetryAfter: retryAfter, Breaker: BreakerFailure}
	default:
		return Verdict{Outcome: attempt.OutcomeRetry, ErrorClass: ClassHTTPInvalid, Breaker: BreakerFailure}
	}
}

// networkClass names a transport error.
func networkClass(err error) string {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	var alertErr tls.AlertError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidCert x509.CertificateInvalidError
	switch {
	case errors.As(err, &dnsErr):
		return ClassDNS
	case errors.As(err, &opErr) && opErr.Op == "dial" && opErr.Timeout():
		return ClassConnectTimeout
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return ClassTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ClassConnectRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ClassConnReset
	case errors.As(err, &certErr), errors.As(err, &recErr), errors.As(err, &alertErr),
		errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &invalidCert):
		return ClassTLS
	}
	return ClassNetwork
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
