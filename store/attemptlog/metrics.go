package attemptlog

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the writer. No label carries an endpoint or delivery id.
type metrics struct {
	batches      prometheus.Counter
	batchSize    prometheus.Histogram
	writeSeconds prometheus.Histogram
	lag          prometheus.Gauge
	held         prometheus.Gauge
	postgresUp   prometheus.Gauge
	records      *prometheus.CounterVec
	writeErrors  *prometheus.CounterVec
	commitErrors prometheus.Counter
	kafkaUp      prometheus.Gauge
	attempts     *prometheus.CounterVec
	dlq          *prometheus.CounterVec
	// folds and foldedBatches: the hourly chart rollup (fold.go).
	folds         *prometheus.CounterVec
	foldedBatches prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_attempt_log_batches_total",
			Help: "Batches of attempt records committed to Postgres.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookd_attempt_log_batch_records",
			Help:    "Attempt records per committed batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8), // 1 .. 16384
		}),
		writeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookd_attempt_log_write_seconds",
			Help:    "Time to write one batch, retries during an outage included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_attempt_log_lag_seconds",
			Help: "Age of the oldest record of the batch last written or being retried (Kafka timestamp to now). Grows during a Postgres outage.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_attempt_log_held_deliveries",
			Help: "Delivery records held until their first attempt is read (their row is then inserted once, in its final state); at the writer's max held the deliveries topic is paused.",
		}),
		postgresUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_attempt_log_postgres_up",
			Help: "1 if the last attempt-log write succeeded, 0 while the writer is retrying a failed one.",
		}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_attempt_log_records_total",
			Help: "Records consumed, by result: inserted, duplicate (attempts already in the log), invalid (skipped, logged), pending (delivery records whose pending row was written, or already there), account_mismatch (records whose account is not their endpoint's or their delivery row's: logged with a WARN, kept out of that account's state).",
		}, []string{"result"}),
		writeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_attempt_log_write_errors_total",
			Help: "Failed attempt-log writes, by kind: transient (retried) or invalid (the batch is split).",
		}, []string{"kind"}),
		commitErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_attempt_log_commit_errors_total",
			Help: "Kafka offset commits that failed after a successful write (retried at the next batch or autocommit; records read again are no-ops).",
		}),
		kafkaUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hookd_attempt_log_kafka_up",
			Help: "0 while the writer sees Kafka fail (fetch, group or offset-commit errors) and waits it out; 1 again from its first successful poll or commit.",
		}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_attempts_total",
			Help: "Delivery attempts logged, by attempt number (1..15, then 16+) and outcome; success rate by attempt number is outcome=\"delivered\" over all.",
		}, []string{"attempt", "outcome"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_dlq_records_total",
			Help: "Deliveries dead-lettered, by reason, counted from the attempt log.",
		}, []string{"reason"}),
		folds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookd_attempt_hours_folds_total",
			Help: "Folds of the hourly chart rollup's staged deltas into webhooks.attempt_hours, by result: ok or failed (the deltas stay staged, the charts still show them, and the next fold takes them).",
		}, []string{"result"}),
		foldedBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hookd_attempt_hours_folded_batches_total",
			Help: "Rows of staged rollup deltas (one per attempt batch written) folded into webhooks.attempt_hours.",
		}),
	}
	for _, c := range []prometheus.Collector{m.batches, m.batchSize, m.writeSeconds, m.lag, m.held, m.postgresUp,
		m.records, m.writeErrors, m.commitErrors, m.kafkaUp, m.attempts, m.dlq, m.folds, m.foldedBatches} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering attempt log metrics: %w", err)
		}
	}
	return m, nil
}
