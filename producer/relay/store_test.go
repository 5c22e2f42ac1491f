package relay_test

import (
	"context"
	"io"
	"log/slog"

	"github.com/hookd/hookd/store"
)

func storeOpen(ctx context.Context, url string) (*store.Store, error) {
	return store.Open(ctx, store.Config{DatabaseURL: url}, slog.New(slog.NewTextHandler(io.Discard, nil)))
}
