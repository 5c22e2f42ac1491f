package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// cleanStopFile, in the data directory, says the broker's last stop was a
// Close: kfake flushed its state and no transaction was left half-written.
// Its absence next to existing data means the process was killed.
const cleanStopFile = "kafka-stopped-cleanly"

// repairTimeout bounds the repair after a crash; a broker that cannot finish
// it refuses to start rather than serve readers a log that hides records.
const repairTimeout = time.Minute

// crashed says whether the broker under dataDir was killed rather than
// closed, and forgets the last clean stop, so that a kill during this run
// (or during the repair) is seen at the next start.
func crashed(dataDir string) (bool, error) {
	_, err := os.Stat(filepath.Join(dataDir, "kafka", "meta.json"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // a new data directory
	}
	if err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	err = os.Remove(filepath.Join(dataDir, cleanStopFile))
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("data dir: %w", err)
	}
	return false, nil
}

func markCleanStop(dataDir string) error {
	return os.WriteFile(filepath.Join(dataDir, cleanStopFile), nil, 0o640)
}

// closeCrashedTransactions writes an abort marker for every transactional
// producer on every partition, through a client of its own, before any
// other client is admitted.
//
// Why: kfake, restarted after a kill, counts a transaction that was open at
// the crash as aborted but writes no marker for it. A read_committed client
// (franz-go's, as Kafka's Java client) that fetches the aborted range drops
// every later batch of that producer id in the same fetch until an abort
// marker, which never comes: the producer's next transactions, committed
// after the restart, are skipped and their consumers commit past them. A
// marker at the end of the log, written before the producer can write
// again, ends the aborted range where Kafka's coordinator would. A marker
// for a producer that had no open transaction there changes nothing: a
// reader ignores an abort marker it was not waiting for.
func closeCrashedTransactions(ctx context.Context, publicAddr, privateAddr string, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, repairTimeout)
	defer cancel()
	var d net.Dialer
	cl, err := kgo.NewClient(kgo.SeedBrokers(publicAddr),
		kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, privateAddr)
		}))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	markers, err := crashMarkers(ctx, adm)
	if err != nil {
		return err
	}
	if len(markers) == 0 {
		logger.InfoContext(ctx, "embedded kafka: not stopped cleanly; no transactional producer to close")
		return nil
	}
	resps, err := adm.WriteTxnMarkers(ctx, markers...)
	if err != nil {
		return fmt.Errorf("writing abort markers: %w", err)
	}
	var failed error
	resps.EachPartition(func(p kadm.TxnMarkersPartitionResponse) {
		if p.Err != nil && failed == nil {
			failed = fmt.Errorf("writing an abort marker to %s[%d]: %w", p.Topic, p.Partition, p.Err)
		}
	})
	if failed != nil {
		return failed
	}
	n := 0
	markers[0].Topics.Each(func(string, int32) { n++ })
	logger.InfoContext(ctx, "embedded kafka: closed the transactions a crash left open",
		"producers", len(markers), "partitions", n)
	return nil
}

// crashMarkers is one abort marker per transactional producer, for every
// partition of every topic.
func crashMarkers(ctx context.Context, adm *kadm.Client) ([]kadm.TxnMarkers, error) {
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("listing transactional producers: %w", err)
	}
	if len(listed) == 0 {
		return nil, nil
	}
	described, err := adm.DescribeTransactions(ctx, listed.TransactionalIDs()...)
	if err != nil {
		return nil, fmt.Errorf("describing transactional producers: %w", err)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	if err := topics.Error(); err != nil {
		return nil, fmt.Errorf("listing topics: %w", err)
	}
	parts := make(kadm.TopicsSet)
	for _, t := range topics {
		parts[t.Topic] = make(map[int32]struct{}, len(t.Partitions))
		for _, p := range t.Partitions {
			parts[t.Topic][p.Partition] = struct{}{}
		}
	}
	var markers []kadm.TxnMarkers
	for _, txn := range described.Sorted() {
		if txn.Err != nil {
			return nil, fmt.Errorf("describing transactional id %s: %w", txn.TxnID, txn.Err)
		}
		markers = append(markers, kadm.TxnMarkers{ProducerID: txn.ProducerID, ProducerEpoch: txn.ProducerEpoch, Topics: parts})
	}
	return markers, nil
}
