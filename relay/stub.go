package relay

// Metrics is a placeholder until the relay lands; replaced by the real implementation.
type Metrics struct{}
