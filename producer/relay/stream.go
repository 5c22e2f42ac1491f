package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/hookd/hookd/internal/drain"
	"github.com/hookd/hookd/store"
)

// txn is one committed transaction's records on their way to Kafka.
type txn struct {
	origin    origin
	end       pglogrepl.LSN
	pending   int
	committed bool
}

// tracker knows which WAL position may be confirmed: the end of the last
// transaction such that it and every earlier one are committed and have
// all their records acknowledged by Kafka.
type tracker struct {
	mu        sync.Mutex
	q         []*txn
	confirmed pglogrepl.LSN
	err       error
}

func (t *tracker) begin(o origin) *txn {
	x := &txn{origin: o}
	t.mu.Lock()
	t.q = append(t.q, x)
	t.mu.Unlock()
	return x
}

func (t *tracker) add(x *txn) {
	t.mu.Lock()
	x.pending++
	t.mu.Unlock()
}

// done records an ack. A failed record stays pending forever: nothing at or
// after its transaction is confirmed, and the stream restarts from before
// it.
func (t *tracker) done(x *txn, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		if t.err == nil {
			t.err = err
		}
		return
	}
	x.pending--
}

func (t *tracker) commit(x *txn, end pglogrepl.LSN) {
	t.mu.Lock()
	x.end, x.committed = end, true
	t.mu.Unlock()
}

func (t *tracker) failed() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// confirm advances past every finished transaction at the head of the
// queue and returns the confirmable position.
func (t *tracker) confirm() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for ; i < len(t.q) && t.q[i].committed && t.q[i].pending == 0; i++ {
		t.confirmed = max(t.confirmed, t.q[i].end)
	}
	t.q = t.q[i:]
	return t.confirmed
}

// idle confirms a keepalive's server position when nothing is in flight:
// every commit before it has been received and acknowledged, so the slot
// may move past WAL that carried nothing for the outbox.
func (t *tracker) idle(at pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.q) == 0 {
		t.confirmed = max(t.confirmed, at)
	}
}

// closeTimeout bounds closing a connection (the replication connection,
// the leader lock's) after ctx ended.
const closeTimeout = 5 * time.Second

// stream runs one replication session until ctx ends (then it drains and
// returns nil if parent ended too) or it fails. Every exit after the start
// of replication goes through the session's drain.
func (r *Relay) stream(ctx, parent context.Context, kc clients) error {
	conn, err := pgconn.ConnectConfig(ctx, r.replicationConfig())
	if err != nil {
		return fmt.Errorf("opening the replication connection: %w", err)
	}
	defer func() {
		cctx, cancel := drain.Context(ctx, closeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()

	// Produces outlive ctx so that a stopping relay drains; they are
	// cancelled only once the drain is over.
	pctx, cancelProduce := drain.Context(ctx, 0)
	pub := r.startPublisher(pctx, kc.produce, kc.solo)
	defer pub.wait()
	defer cancelProduce()

	start, err := r.startReplication(ctx, conn, pub, kc.tail)
	if err != nil {
		return err
	}
	// Only now that this session owns the slot: a previous leader's
	// records have all landed. The stream waits meanwhile; Postgres hears
	// from the session so that a long scan does not time it out.
	stopKeepAlive := r.keepAlive(ctx, conn, start)
	skip, err := r.published(ctx, kc.tail, func(lsn pglogrepl.LSN) bool { return lsn >= start })
	stopKeepAlive()
	if err != nil {
		return fmt.Errorf("relay resume: %w", err)
	}
	if len(skip.rows) > 0 {
		r.logger.InfoContext(ctx, "relay resuming: rows since the slot's position are on the events topic already and will be skipped",
			"rows", len(skip.rows), "up_to_lsn", skip.top.String())
	}
	var wg sync.WaitGroup
	pruneCtx, stopPrune := context.WithCancel(ctx)
	defer wg.Wait()
	defer stopPrune()
	wg.Go(func() { r.prune(pruneCtx) })

	s := &session{r: r, conn: conn, pub: pub, cancelProduce: cancelProduce,
		tr: &tracker{confirmed: start}, sent: start, skip: skip, progress: time.Now(),
		relations: map[uint32]*pglogrepl.RelationMessage{}, types: pgtype.NewMap(),
		nextStatus: time.Now().Add(r.cfg.StatusInterval)}
	err = s.receiveLoop(ctx)
	s.drain(ctx)
	if err == nil && parent.Err() == nil {
		err = context.Cause(ctx)
	}
	return err
}

// keepAlive reports pos to Postgres every StatusInterval until stop is
// called, while nothing else uses conn.
func (r *Relay) keepAlive(ctx context.Context, conn *pgconn.PgConn, pos pglogrepl.LSN) (stop func()) {
	kctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(r.cfg.StatusInterval)
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
			}
			if err := pglogrepl.SendStandbyStatusUpdate(kctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
				return // the stream's next read reports it
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// startReplication makes sure the slot exists (back-filled) and starts
// streaming from its confirmed position, which it returns.
func (r *Relay) startReplication(ctx context.Context, conn *pgconn.PgConn, pub *publisher, tail *kgo.Client) (pglogrepl.LSN, error) {
	if err := r.ensureSlot(ctx, conn, pub, tail); err != nil {
		return 0, err
	}
	lag, err := r.st.ReplicationSlotLag(ctx, r.cfg.Slot)
	if err != nil {
		return 0, err
	}
	// LSN 0: resume from the slot's confirmed position, never from the
	// server's current one.
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", r.cfg.Publication)},
	})
	if isSlotBusy(err) {
		return 0, fmt.Errorf("replication slot %s is still in use by another connection (a previous leader closing): %w", r.cfg.Slot, err)
	}
	if err != nil {
		return 0, fmt.Errorf("starting replication on slot %s: %w", r.cfg.Slot, err)
	}
	start := pglogrepl.LSN(lag.ConfirmedLSN)
	r.logger.InfoContext(ctx, "relay streaming", "from_lsn", start.String())
	return start, nil
}

// session is one replication session's state, from the start of
// replication to its drain.
type session struct {
	r             *Relay
	conn          *pgconn.PgConn
	pub           *publisher
	cancelProduce context.CancelFunc
	tr            *tracker
	// sent is the position last reported to Postgres.
	sent       pglogrepl.LSN
	relations  map[uint32]*pglogrepl.RelationMessage
	types      *pgtype.Map
	cur        *txn
	nextStatus time.Time
	// readDeadline is the connection's read deadline as receive last set
	// it (zero: unknown, set it again).
	readDeadline time.Time
	// skip holds the rows on the events topic already, until the stream
	// passes the last of them.
	skip *publishedSet
	// progress is when Kafka last acknowledged a record or nothing was
	// waiting for it; stalled is set once that is StallAfter ago.
	progress time.Time
	stalled  bool
}

// receiveLoop applies the stream's messages until ctx ends (it returns
// nil) or something fails (it returns why). It does not drain.
func (s *session) receiveLoop(ctx context.Context) error {
	// ctx ending cuts the read in progress short: its deadline moves to
	// now, so a shutdown does not wait for the next status update (up to
	// StatusInterval, 30s at most).
	stop := context.AfterFunc(ctx, func() { _ = s.conn.Conn().SetReadDeadline(time.Now()) })
	defer stop()
	for ctx.Err() == nil {
		if err := s.tr.failed(); err != nil {
			return fmt.Errorf("producing to %s: %w", s.r.cfg.EventsTopic, err)
		}
		now := time.Now()
		if !now.Before(s.nextStatus) {
			if err := s.sendStatus(ctx, true); err != nil {
				return err
			}
			now = time.Now()
			s.nextStatus = now.Add(s.r.cfg.StatusInterval)
		}
		s.watchKafka(ctx, now)
		if s.pub.full() {
			// Kafka is behind or away: stop reading the stream (Produce
			// would block) but keep reporting to Postgres.
			if err := s.pub.waitRoom(ctx, s.nextStatus); err != nil && ctx.Err() == nil {
				return err
			}
			continue
		}
		if err := s.receive(ctx); err != nil {
			return err
		}
	}
	return nil
}

// watchKafka reports an outage when Kafka has acknowledged nothing for
// StallAfter while records wait, and its end when it acknowledges again.
func (s *session) watchKafka(ctx context.Context, now time.Time) {
	backlog := s.pub.backlog()
	if backlog == 0 {
		s.progress = now
	} else if at := time.Unix(0, s.pub.lastAck.Load()); at.After(s.progress) {
		s.progress = at
	}
	waiting := now.Sub(s.progress)
	switch {
	case waiting >= s.r.cfg.StallAfter && !s.stalled:
		s.stalled = true
		s.r.outage.begin(ctx, "relay waiting for Kafka: it has acknowledged none of the relay's records for "+waiting.Round(time.Millisecond).String(),
			"unacknowledged", backlog, "events_topic", s.r.cfg.EventsTopic)
		s.r.stall.waiting(s.progress, fmt.Sprintf("Kafka has acknowledged none of %d records on %s", backlog, s.r.cfg.EventsTopic))
	case waiting < s.r.cfg.StallAfter:
		s.stalled = false
		s.r.outage.end(ctx, "relay publishing again")
	}
}

// receive waits for one message until the next status update is due and
// applies it. The wait is a read deadline on the connection, set only when
// nextStatus moves (a context per message cost a timer and a context
// watcher each), and no cancellation: cancelling ReceiveMessage would close
// the connection before the drain's final status update. ctx ending moves
// the deadline to now (receiveLoop); checked after setting it, so that a
// deadline set here never undoes that.
func (s *session) receive(ctx context.Context) error {
	if s.nextStatus.IsZero() {
		return nil // a status update is due first
	}
	if !s.readDeadline.Equal(s.nextStatus) {
		if err := s.conn.Conn().SetReadDeadline(s.nextStatus); err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		s.readDeadline = s.nextStatus
	}
	if ctx.Err() != nil {
		return nil
	}
	msg, err := s.conn.ReceiveMessage(context.Background())
	if err != nil {
		if pgconn.Timeout(err) {
			return nil
		}
		return fmt.Errorf("replication stream: %w", err)
	}
	switch m := msg.(type) {
	case *pgproto3.ErrorResponse:
		return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
	case *pgproto3.CopyDone:
		return errors.New("replication stream: the server ended it")
	case *pgproto3.CopyData:
		return s.copyData(m.Data)
	}
	return nil
}

// copyData applies a keepalive or a WAL data message.
func (s *session) copyData(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("replication keepalive: %w", err)
		}
		if s.cur == nil {
			s.tr.confirm()
			s.tr.idle(pkm.ServerWALEnd)
		}
		if pkm.ReplyRequested {
			s.nextStatus = time.Time{}
		}
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("replication data: %w", err)
		}
		return s.handle(xld.WALData)
	}
	return nil
}

// sendStatus reports the confirmable position to Postgres if it moved
// (or always, if force).
func (s *session) sendStatus(ctx context.Context, force bool) error {
	c := s.tr.confirm()
	if c == s.sent && !force {
		return nil
	}
	if err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: c}); err != nil {
		return fmt.Errorf("confirming %s: %w", c, err)
	}
	if c > s.sent {
		s.r.stall.progress()
	}
	s.sent = c
	return nil
}

// drain ends every session, whatever stopped it: it waits for Kafka's
// acks (within DrainTimeout), cancels the produces still open and confirms
// what the acks cover, on a context of its own (ctx has usually ended).
func (s *session) drain(ctx context.Context) {
	dctx, cancel := drain.Context(ctx, s.r.cfg.DrainTimeout)
	defer cancel()
	if err := s.pub.flush(dctx); err != nil {
		s.r.logger.WarnContext(dctx, "relay drain: unacknowledged records will be published by the next leader", "error", err.Error())
	}
	s.cancelProduce()
	if err := s.sendStatus(dctx, false); err != nil {
		s.r.logger.WarnContext(dctx, "relay drain: final confirmation failed; the next leader streams again from the previous one and skips what is published", "error", err.Error())
	}
	s.r.logger.InfoContext(dctx, "relay stopped streaming", "confirmed_lsn", s.sent.String())
}

// handle applies one pgoutput message.
func (s *session) handle(data []byte) error {
	if len(data) > 0 && data[0] == 'I' {
		return s.insert(data)
	}
	lm, err := pglogrepl.Parse(data)
	if err != nil {
		return fmt.Errorf("decoding pgoutput message: %w", err)
	}
	switch m := lm.(type) {
	case *pglogrepl.RelationMessage:
		s.relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		if s.skip != nil && m.FinalLSN > s.skip.top {
			s.skip = nil // past everything a previous leader published
		}
		s.cur = s.tr.begin(origin{lsn: m.FinalLSN, committed: m.CommitTime})
	case *pglogrepl.CommitMessage:
		if s.cur == nil {
			return errors.New("pgoutput commit without begin")
		}
		s.tr.commit(s.cur, m.TransactionEndLSN)
		s.cur = nil
	}
	return nil
}

// insert publishes an outbox insert (a pgoutput insert message, which it
// decodes by hand: pglogrepl copies every column), unless it is on the
// topic already.
func (s *session) insert(data []byte) error {
	relID, tuple, err := insertRelation(data)
	if err != nil {
		return err
	}
	rel, ok := s.relations[relID]
	if !ok {
		return fmt.Errorf("pgoutput insert for unknown relation %d", relID)
	}
	if rel.Namespace != "webhooks" || rel.RelationName != "outbox" {
		return nil // not ours: the publication was widened by hand
	}
	if s.cur == nil {
		return errors.New("pgoutput insert outside a transaction")
	}
	row, err := decodeInsert(rel, tuple, s.types)
	if err != nil {
		return err
	}
	x := s.cur
	if s.skip.has(rowKey{lsn: x.origin.lsn, id: row.ID}) {
		s.r.m.skipped.Inc()
		return nil
	}
	s.r.m.receiveLatency.Observe(max(time.Since(x.origin.committed), 0).Seconds())
	s.tr.add(x)
	return s.pub.publish(row, x.origin, s.r.m.published, func(err error) { s.tr.done(x, err) })
}

// ensureSlot makes sure the slot exists and has been back-filled: a new
// slot first publishes the outbox rows committed before it existed, read
// from the snapshot the slot exports.
func (r *Relay) ensureSlot(ctx context.Context, conn *pgconn.PgConn, pub *publisher, tail *kgo.Client) error {
	st, err := r.st.ReplicationSlot(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	db := conn.ParameterStatus("database")
	if db == "" {
		db = r.st.Pool().Config().ConnConfig.Database
	}
	if st.Exists && (st.Plugin != "pgoutput" || (st.Database != "" && db != "" && st.Database != db)) {
		return fmt.Errorf("%w: replication slot %q exists for database %q with plugin %q; the relay needs one of its own (choose another slot name)",
			store.ErrRelaySetup, r.cfg.Slot, st.Database, st.Plugin)
	}
	switch {
	case st.Exists && st.Backfilled:
		return nil
	case st.Exists:
		r.logger.WarnContext(ctx, "relay slot exists but its back-fill never finished; re-creating it")
		if err := r.st.DropReplicationSlot(ctx, r.cfg.Slot); err != nil {
			return err
		}
	case st.Backfilled:
		r.logger.WarnContext(ctx, "relay slot is gone (dropped by hand?); re-creating it and re-publishing the rows still in the outbox table")
		if err := r.st.ForgetBackfill(ctx, r.cfg.Slot); err != nil {
			return err
		}
	}
	// What an interrupted back-fill (or the slot's previous life)
	// published already.
	skip, err := r.published(ctx, tail, func(lsn pglogrepl.LSN) bool { return lsn == 0 })
	if err != nil {
		return fmt.Errorf("back-filling slot %s: %w", r.cfg.Slot, err)
	}
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, r.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return fmt.Errorf("creating replication slot %s: %w", r.cfg.Slot, err)
	}
	r.logger.InfoContext(ctx, "relay created its replication slot; back-filling committed outbox rows", "consistent_point", res.ConsistentPoint)
	tr := &tracker{}
	x := tr.begin(origin{})
	var n int64
	err = r.st.OutboxSnapshot(ctx, res.SnapshotName, func(row store.OutboxRow) error {
		n++
		if skip.has(rowKey{id: row.ID}) {
			r.m.skipped.Inc()
			return nil
		}
		if err := pub.waitRoom(ctx, time.Time{}); err != nil {
			return err
		}
		tr.add(x)
		if err := pub.publish(row, origin{}, r.m.backfilled, func(err error) { tr.done(x, err) }); err != nil {
			return err
		}
		return tr.failed()
	})
	if err != nil {
		return fmt.Errorf("back-filling slot %s: %w", r.cfg.Slot, err)
	}
	if err := pub.flush(ctx); err != nil {
		return fmt.Errorf("back-filling slot %s: %w", r.cfg.Slot, err)
	}
	if err := tr.failed(); err != nil {
		return fmt.Errorf("back-filling slot %s: producing: %w", r.cfg.Slot, err)
	}
	if err := r.st.MarkBackfilled(ctx, r.cfg.Slot, n); err != nil {
		return err
	}
	r.logger.InfoContext(ctx, "relay back-fill done", "rows", n)
	return nil
}
