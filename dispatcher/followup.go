package dispatcher

import (
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/deadletter"
	"github.com/hookd/hookd/dispatcher/internal/sched"
	"github.com/hookd/hookd/internal/attempt"
	"github.com/hookd/hookd/internal/delivery"
)

// A record's follow-up, its retry record or dead letter, is produced and
// acknowledged before its attempt record. A process killed between the
// two leaves the follow-up without the attempt record that finishes its
// source, and a read-back of the attempts topic alone sends the source
// again: the delivery forks into two chains of attempts, each of which
// ends in a 2xx, or in a dead letter for a delivery that was delivered.
// So a read-back reads the retry tiers and the DLQ too (their partitions
// of the resumed numbers: a follow-up keeps its source's partition
// number), and a source whose follow-up it finds is answered.

// headerSource names, on a retry record, the record whose attempt (or
// deferral) produced it: "<topic>/<partition>/<offset>". Topic names
// cannot hold a slash. Dead letters name theirs in their provenance.
const headerSource = "hookd-source"

// sourceHeader is the headerSource of a follow-up of src.
func sourceHeader(src *kgo.Record) kgo.RecordHeader {
	v := src.Topic + "/" + strconv.Itoa(int(src.Partition)) + "/" + strconv.FormatInt(src.Offset, 10)
	return kgo.RecordHeader{Key: headerSource, Value: []byte(v)}
}

// parseSource reads a headerSource value.
func parseSource(v string) (attempt.Position, bool) {
	rest, off, ok := cutLast(v)
	if !ok {
		return attempt.Position{}, false
	}
	topic, part, ok := cutLast(rest)
	if !ok || topic == "" {
		return attempt.Position{}, false
	}
	o, err1 := strconv.ParseInt(off, 10, 64)
	p, err2 := strconv.ParseInt(part, 10, 32)
	if err1 != nil || err2 != nil || o < 0 || p < 0 {
		return attempt.Position{}, false
	}
	return attempt.Position{Topic: topic, Partition: int32(p), Offset: o}, true
}

func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// followUp is a source's retry record (retry) or dead letter (dlq, prov)
// found by a read-back.
type followUp struct {
	retry *delivery.Delivery
	dlq   *attempt.Position
	prov  deadletter.Provenance
}

// addRetry takes a retry record read back: its source, when resumed, is
// answered.
func (s *readBackState) addRetry(kr *kgo.Record) {
	var src attempt.Position
	found := false
	for _, h := range kr.Headers {
		if h.Key == headerSource {
			src, found = parseSource(string(h.Value))
		}
	}
	if !found {
		return // from a dispatcher before follow-ups named their source
	}
	dl, err := delivery.Decode(kr)
	if err != nil {
		return
	}
	s.addFollowUp(src, followUp{retry: dl})
}

// addDeadLetter takes a dead letter read back: its origin, when resumed,
// is answered.
func (s *readBackState) addDeadLetter(kr *kgo.Record) {
	prov, err := deadletter.Read(kr)
	if err != nil || prov.OriginTopic == "" {
		return
	}
	src := attempt.Position{Topic: prov.OriginTopic, Partition: prov.OriginPartition, Offset: prov.OriginOffset}
	s.addFollowUp(src, followUp{dlq: &attempt.Position{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset}, prov: prov})
}

func (s *readBackState) addFollowUp(src attempt.Position, f followUp) {
	part := sched.Partition{Topic: src.Topic, Partition: src.Partition}
	if _, ok := s.starts[part]; !ok {
		return
	}
	if s.answered[part] == nil {
		s.answered[part] = map[int64]bool{}
	}
	s.answered[part][src.Offset] = true
	s.followUps[src] = f
}

// followedAttempt completes rec, the attempt record of a request whose
// own attempt record was lost but whose follow-up f was produced: what the
// follow-up tells of the answer (its status and error class) and of what
// came next.
func followedAttempt(rec *attempt.Record, f followUp) {
	if f.retry != nil {
		rec.Outcome, rec.NextAction, rec.NextDueAt = attempt.OutcomeRetry, attempt.NextRetry, f.retry.DueAt
		if f.retry.LastError == ClassCircuitOpen {
			rec.Outcome = attempt.OutcomeCircuitOpen
		}
		rec.StatusCode, rec.ErrorClass = f.retry.LastStatus, f.retry.LastError
		rec.Error = "attempt record lost; outcome from its retry record"
		return
	}
	rec.Outcome, rec.NextAction, rec.DLQ, rec.DeadReason = deadOutcome(f.prov.Reason), attempt.NextDeadLetter, f.dlq, f.prov.Reason
	rec.StatusCode, rec.ErrorClass = f.prov.LastStatus, f.prov.ErrorClass
	rec.Error = "attempt record lost; outcome from its dead letter"
}

// deadOutcome is the outcome of an attempt whose record was dead-lettered
// for reason.
func deadOutcome(reason string) attempt.Outcome {
	switch reason {
	case deadletter.ReasonRetriesExhausted:
		return attempt.OutcomeRetry
	case deadletter.ReasonEndpointGone:
		return attempt.OutcomeGone
	case deadletter.ReasonSSRFRefused:
		return attempt.OutcomeRefused
	}
	return attempt.OutcomePermanent
}

// followUpFor is the follow-up of in's attempt, if found: a retry record
// of the next attempt, or a dead letter.
func (s *readBackState) followUpFor(in attempt.Intent) (followUp, bool) {
	f, ok := s.followUps[in.Source]
	if !ok || (f.retry != nil && f.retry.Attempt != in.Attempt+1) {
		return followUp{}, false
	}
	return f, true
}
