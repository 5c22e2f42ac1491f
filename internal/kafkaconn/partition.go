package kafkaconn

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}
