package cmdline

import "github.com/hookd/hookd/internal/kafkaconn"

// KafkaSecurityFlags are how hookd and hookctl authenticate to a real
// cluster: TLS and SASL. Both binaries embed them, so they read the same
// HOOKD_* variables. There is deliberately no flag to skip certificate
// verification: give --kafka-tls-ca instead.
type KafkaSecurityFlags struct {
	KafkaTLS           bool   `name:"kafka-tls" env:"HOOKD_KAFKA_TLS" help:"Connect to Kafka over TLS (implied by any other --kafka-tls-* flag)."`
	KafkaTLSCA         string `name:"kafka-tls-ca" env:"HOOKD_KAFKA_TLS_CA" type:"path" help:"PEM file of the CAs that sign the brokers' certificates (default: the system's roots)."`
	KafkaTLSCert       string `name:"kafka-tls-cert" env:"HOOKD_KAFKA_TLS_CERT" type:"path" help:"PEM client certificate, for clusters that authenticate clients by certificate (with --kafka-tls-key)."`
	KafkaTLSKey        string `name:"kafka-tls-key" env:"HOOKD_KAFKA_TLS_KEY" type:"path" help:"PEM key of --kafka-tls-cert."`
	KafkaTLSServerName string `name:"kafka-tls-server-name" env:"HOOKD_KAFKA_TLS_SERVER_NAME" help:"Name expected in the brokers' certificates (default: the host dialled)."`
	KafkaSASLMechanism string `name:"kafka-sasl-mechanism" env:"HOOKD_KAFKA_SASL_MECHANISM" help:"SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL). Use PLAIN only with TLS."`
	KafkaSASLUsername  string `name:"kafka-sasl-username" env:"HOOKD_KAFKA_SASL_USERNAME" help:"SASL username."`
	KafkaSASLPassword  string `name:"kafka-sasl-password" env:"HOOKD_KAFKA_SASL_PASSWORD" help:"SASL password; prefer the environment variable (a flag shows in the process list)."`
}

// ApplyTo copies the flags into cfg.
func (f KafkaSecurityFlags) ApplyTo(cfg *kafkaconn.Config) {
	cfg.TLS = kafkaconn.TLS{
		Enabled: f.KafkaTLS, CAFile: f.KafkaTLSCA, CertFile: f.KafkaTLSCert, KeyFile: f.KafkaTLSKey, ServerName: f.KafkaTLSServerName,
	}
	cfg.SASL = kafkaconn.SASL{Mechanism: f.KafkaSASLMechanism, Username: f.KafkaSASLUsername, Password: f.KafkaSASLPassword}
}

// Given reports whether any TLS or SASL flag is given.
func (f KafkaSecurityFlags) Given() bool { return f != KafkaSecurityFlags{} }

// KafkaConfig applies the flags to cfg and validates the result; hookctl
// builds its client with it.
func (f KafkaSecurityFlags) KafkaConfig(cfg kafkaconn.Config) (kafkaconn.Config, error) {
	f.ApplyTo(&cfg)
	cfg.SetDefaults()
	return cfg, cfg.Validate()
}
