package retrytiers_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (a
// gate's timer callback still running, for example).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
