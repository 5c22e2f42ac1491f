package cli

import (
	"errors"

	"github.com/hookd/hookd/internal/topics"
)

// ReplicationFlags size the replication of the topics hookd creates. Topics
// that already exist are never changed.
type ReplicationFlags struct {
	ReplicationFactor int16 `name:"replication-factor" default:"0" env:"HOOKD_REPLICATION_FACTOR" help:"Replication factor of created topics: 0 picks 3 with --brokers and 1 on the embedded broker; -1 uses the cluster's default."`
	MinInsyncReplicas int16 `name:"min-insync-replicas" default:"0" env:"HOOKD_MIN_INSYNC_REPLICAS" help:"min.insync.replicas of created topics: 0 picks 2 when the replication factor is 3 or more, else 1; -1 uses the cluster's default."`
}

// apply sets the replication of cfg; embedded is true when hookd runs its
// own one-broker Kafka.
func (f ReplicationFlags) apply(cfg *topics.Config, embedded bool) {
	cfg.ReplicationFactor, cfg.MinInsyncReplicas = f.ReplicationFactor, f.MinInsyncReplicas
	if cfg.ReplicationFactor == 0 {
		cfg.ReplicationFactor = 3
		if embedded {
			cfg.ReplicationFactor = 1
		}
	}
}

var errSecurityEmbedded = errors.New("kafka tls/sasl flags need --brokers: the embedded broker speaks plaintext on loopback only")
