package endpoint

// Ordering is how an endpoint's deliveries are ordered.
type Ordering string

const (
	// OrderingNone: deliveries go out concurrently (up to the endpoint's
	// in-flight limit) and a failed one is retried through the retry
	// tiers while later ones go on. The default.
	OrderingNone Ordering = "none"
	// OrderingFIFO: one request at a time, in the order the deliveries
	// sit in the endpoint's partition (commit order per account for
	// outbox events, ingress partition order for ingress events); a
	// failure is retried in place and the later deliveries wait
	// (head-of-line blocking).
	OrderingFIFO Ordering = "fifo"
)

// OrderingOf is o with "" read as the default, OrderingNone.
func OrderingOf(o Ordering) Ordering {
	if o == "" {
		return OrderingNone
	}
	return o
}

// ValidateOrdering checks o: "" (the default), "none" or "fifo".
func ValidateOrdering(o Ordering) error {
	switch o {
	case "", OrderingNone, OrderingFIFO:
		return nil
	}
	return invalid("ordering: must be %q or %q, got %q", OrderingNone, OrderingFIFO, clip(string(o)))
}

// FIFO reports whether e's deliveries are sent one at a time in order.
func (e *Endpoint) FIFO() bool { return e.Ordering == OrderingFIFO }
