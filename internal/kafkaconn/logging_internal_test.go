package kafkaconn

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// The Kafka client's info lines are logged at debug, its warnings at warn:
// at the default level an operator sees hookd's lines, not the client's.
func TestKafkaClientInfoIsDebug(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	l := kslog.New(slog.New(quietInfo{logger.Handler()}))
	l.Log(kgo.LogLevelInfo, "metadata update", "broker", 1)
	l.Log(kgo.LogLevelWarn, "unable to dial", "broker", 1)
	out := buf.String()
	if strings.Contains(out, "metadata update") {
		t.Fatalf("client info logged at the default level: %q", out)
	}
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "unable to dial") {
		t.Fatalf("client warning missing or demoted: %q", out)
	}
	buf.Reset()
	debug := slog.New(quietInfo{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})})
	kslog.New(debug).Log(kgo.LogLevelInfo, "metadata update")
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Fatalf("client info missing at --log-level debug: %q", buf.String())
	}
}
