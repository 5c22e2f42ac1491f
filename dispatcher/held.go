package dispatcher

// heldQueue holds a partition's records from the first unfinished one on,
// in offset order: the commit watermark is its head. Records finish in any
// order; a finished record is marked, not removed, and the head moves past
// the finished records in front of it, so a completion costs O(1)
// amortised instead of a copy of the tail. The finished records behind an
// unfinished head are dropped by a compaction once they make up half of
// the slice, so its length stays within about twice the unfinished count.
// Not safe for concurrent use (Dispatcher.mu guards it).
type heldQueue struct {
	// items[head:] are the records from the first unfinished one on
	// (finished ones among them are marked); items[:head] are nil.
	items []*item
	head  int
	held  int // unfinished records
}

// push appends it, the record after the last one pushed.
func (q *heldQueue) push(it *item) {
	if n := len(q.items); n > 0 && n == cap(q.items) && n-q.held >= n/2 {
		q.compact() // frees at least half the slice: O(1) amortised
	}
	q.items = append(q.items, it)
	q.held++
}

// finish marks it finished; false if it already was. it must have been
// pushed.
func (q *heldQueue) finish(it *item) bool {
	if it.finished {
		return false
	}
	it.finished = true
	q.held--
	if q.items[q.head] != it {
		return true // behind the head: the watermark does not move
	}
	for q.head < len(q.items) && q.items[q.head].finished {
		q.items[q.head] = nil
		q.head++
	}
	if q.head == len(q.items) {
		q.items, q.head = q.items[:0], 0
	}
	return true
}

// compact drops the finished records and moves the rest to the front.
func (q *heldQueue) compact() {
	n := 0
	for _, it := range q.items[q.head:] {
		if !it.finished {
			q.items[n] = it
			n++
		}
	}
	clear(q.items[n:])
	q.items, q.head = q.items[:n], 0
}

// first returns the first unfinished record, or nil.
func (q *heldQueue) first() *item {
	if q.head == len(q.items) {
		return nil
	}
	return q.items[q.head]
}

// len is the number of unfinished records.
func (q *heldQueue) len() int { return q.held }

// all returns the records from the first unfinished one on, in offset
// order, finished ones included (it.finished): callers skip those. The
// slice is valid until the next push or finish.
func (q *heldQueue) all() []*item { return q.items[q.head:] }
