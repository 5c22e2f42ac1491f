package drain_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hookd/hookd/internal/drain"
)

type key struct{}

func TestContextOutlivesItsParentUntilTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		cancel()
		ctx, stop := drain.Context(parent, 5*time.Second)
		defer stop()
		if ctx.Err() != nil {
			t.Fatal("ended with its parent")
		}
		if ctx.Value(key{}) != "v" {
			t.Fatal("lost the parent's values")
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if ctx.Err() != context.DeadlineExceeded {
			t.Fatalf("after the bound: %v, want deadline exceeded", ctx.Err())
		}
	})
}

func TestContextWithoutBoundEndsOnlyByCancel(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, stop := drain.Context(parent, 0)
	if _, ok := ctx.Deadline(); ok || ctx.Err() != nil {
		t.Fatal("an unbounded drain context has a deadline or is done")
	}
	stop()
	if ctx.Err() != context.Canceled {
		t.Fatalf("after cancel: %v", ctx.Err())
	}
}
