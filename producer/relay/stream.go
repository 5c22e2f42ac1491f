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

	"github.com/hookd/hookd/store"
)

// txn is one committed transaction's records on their way to Kafka.
type txn struct {
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

func (t *tracker) begin() *txn {
	x := &txn{}
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

// stream runs one replication session until ctx ends (then it drains and
// returns nil if parent ended too) or it fails.
func (r *Relay) stream(ctx, parent context.Context, cl, solo *kgo.Client, wg *sync.WaitGroup) error {
	conn, err := pgconn.ConnectConfig(ctx, r.replicationConfig())
	if err != nil {
		return fmt.Errorf("opening the replication connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	// Produces outlive ctx so that a stopping relay drains; they are
	// cancelled only once the drain timeout is over.
	pctx, cancelProduce := context.WithCancel(context.WithoutCancel(ctx))
	pub := r.startPublisher(pctx, cl, solo)
	defer pub.wait()
	defer cancelProduce()

	if err := r.ensureSlot(ctx, conn, pub); err != nil {
		return err
	}
	start, err := r.st.ReplicationSlotLag(ctx, r.cfg.Slot)
	if err != nil {
		return err
	}
	// LSN 0: resume from the slot's confirmed position, never from the
	// server's current one.
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", r.cfg.Publication)},
	})
	if isSlotBusy(err) {
		return fmt.Errorf("replication slot %s is still in use by another connection (a previous leader closing): %w", r.cfg.Slot, err)
	}
	if err != nil {
		return fmt.Errorf("starting replication on slot %s: %w", r.cfg.Slot, err)
	}
	r.logger.InfoContext(ctx, "relay streaming", "from_lsn", pglogrepl.LSN(start.ConfirmedLSN).String())
	wg.Go(func() { r.prune(ctx) })

	tr := &tracker{confirmed: pglogrepl.LSN(start.ConfirmedLSN)}
	sent := tr.confirmed
	sendStatus := func(force bool) error {
		c := tr.confirm()
		if c == sent && !force {
			return nil
		}
		if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: c}); err != nil {
			return fmt.Errorf("confirming %s: %w", c, err)
		}
		sent = c
		return nil
	}
	// drain waits for Kafka's acks and confirms what they cover.
	drain := func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.DrainTimeout)
		defer cancel()
		if err := pub.flush(fctx); err != nil {
			r.logger.WarnContext(fctx, "relay drain: unacknowledged records will be re-published by the next leader", "error", err.Error())
		}
		cancelProduce()
		if err := sendStatus(false); err != nil {
			r.logger.WarnContext(fctx, "relay drain: final confirmation failed; the next leader re-publishes from the previous one", "error", err.Error())
		}
		r.logger.InfoContext(fctx, "relay stopped streaming", "confirmed_lsn", sent.String())
	}

	relations := map[uint32]*pglogrepl.RelationMessage{}
	types := pgtype.NewMap()
	var cur *txn
	nextStatus := time.Now().Add(r.cfg.StatusInterval)
	for {
		if ctx.Err() != nil {
			drain()
			if parent.Err() != nil {
				return nil
			}
			return context.Cause(ctx)
		}
		if err := tr.failed(); err != nil {
			drain()
			return fmt.Errorf("producing to %s: %w", r.cfg.EventsTopic, err)
		}
		if !time.Now().Before(nextStatus) {
			if err := sendStatus(true); err != nil {
				drain()
				return err
			}
			nextStatus = time.Now().Add(r.cfg.StatusInterval)
		}
		rctx, cancel := context.WithDeadline(context.Background(), nextStatus)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			drain()
			return fmt.Errorf("replication stream: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			drain()
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			drain()
			return errors.New("replication stream: the server ended it")
		case *pgproto3.CopyData:
			if len(m.Data) == 0 {
				continue
			}
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					drain()
					return fmt.Errorf("replication keepalive: %w", err)
				}
				if cur == nil {
					tr.confirm()
					tr.idle(pkm.ServerWALEnd)
				}
				if pkm.ReplyRequested {
					nextStatus = time.Time{}
				}
			case pglogrepl.XLogDataByteID:
				xld, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					drain()
					return fmt.Errorf("replication data: %w", err)
				}
				if cur, err = r.handle(pub, tr, cur, relations, types, xld.WALData); err != nil {
					drain()
					return err
				}
			}
		}
	}
}

// handle applies one pgoutput message and returns the open transaction.
func (r *Relay) handle(pub *publisher, tr *tracker, cur *txn,
	relations map[uint32]*pglogrepl.RelationMessage, types *pgtype.Map, data []byte) (*txn, error) {
	lm, err := pglogrepl.Parse(data)
	if err != nil {
		return cur, fmt.Errorf("decoding pgoutput message: %w", err)
	}
	switch m := lm.(type) {
	case *pglogrepl.RelationMessage:
		relations[m.RelationID] = m
	case *pglogrepl.BeginMessage:
		return tr.begin(), nil
	case *pglogrepl.CommitMessage:
		if cur == nil {
			return nil, errors.New("pgoutput commit without begin")
		}
		tr.commit(cur, m.TransactionEndLSN)
		return nil, nil
	case *pglogrepl.InsertMessage:
		rel, ok := relations[m.RelationID]
		if !ok {
			return cur, fmt.Errorf("pgoutput insert for unknown relation %d", m.RelationID)
		}
		if rel.Namespace != "webhooks" || rel.RelationName != "outbox" {
			return cur, nil // not ours: the publication was widened by hand
		}
		if cur == nil {
			return nil, errors.New("pgoutput insert outside a transaction")
		}
		row, err := decodeInsert(rel, m, types)
		if err != nil {
			return cur, err
		}
		x := cur
		tr.add(x)
		if err := pub.publish(row, r.m.published, func(err error) { tr.done(x, err) }); err != nil {
			return cur, err
		}
	}
	return cur, nil
}

// ensureSlot makes sure the slot exists and has been back-filled: a new
// slot first publishes the outbox rows committed before it existed, read
// from the snapshot the slot exports.
func (r *Relay) ensureSlot(ctx context.Context, conn *pgconn.PgConn, pub *publisher) error {
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
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, r.cfg.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return fmt.Errorf("creating replication slot %s: %w", r.cfg.Slot, err)
	}
	r.logger.InfoContext(ctx, "relay created its replication slot; back-filling committed outbox rows", "consistent_point", res.ConsistentPoint)
	tr := &tracker{}
	x := tr.begin()
	var n int64
	err = r.st.OutboxSnapshot(ctx, res.SnapshotName, func(row store.OutboxRow) error {
		n++
		tr.add(x)
		if err := pub.publish(row, r.m.backfilled, func(err error) { tr.done(x, err) }); err != nil {
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
