package attemptlog

import (
	"context"
	"time"
)

// The hourly chart rollup (webhooks.attempt_hours) is not written in a
// batch's transaction: a batch stages its deltas as one row, committed with
// its attempts (so no crash loses or doubles them), and the writer folds
// the staged rows into the rollup every FoldInterval, in a short
// transaction of its own (store.FoldAttemptHours), and once more when it
// stops. The portal charts read the staged rows too, so they never lag; a
// fold that fails leaves every row it took staged, and the next fold (this
// writer's or another's) takes them.

// startFolds folds every FoldInterval until the returned stop is called;
// stop waits for the loop, then folds once more (within DrainTimeout) so
// that a writer stopping gracefully leaves nothing staged.
func (w *Writer) startFolds(ctx context.Context) (stop func()) {
	if w.cfg.FoldInterval < 0 {
		return func() {}
	}
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.FoldInterval)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				w.fold(lctx)
			}
		}
	}()
	return func() {
		cancel()
		<-done
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.DrainTimeout)
		defer fcancel()
		w.fold(fctx)
	}
}

// fold runs one fold, bounded by WriteTimeout, and counts it.
func (w *Writer) fold(ctx context.Context) {
	fctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	defer cancel()
	res, err := w.deps.Store.FoldAttemptHours(fctx)
	if err != nil {
		if ctx.Err() != nil {
			return // the writer is stopping: its final fold follows
		}
		w.m.folds.WithLabelValues("failed").Inc()
		w.deps.Logger.WarnContext(ctx, "folding the hourly chart rollup failed; the deltas stay staged and the next fold takes them",
			"error", err)
		return
	}
	w.m.folds.WithLabelValues("ok").Inc()
	w.m.foldedBatches.Add(float64(res.Batches))
}
