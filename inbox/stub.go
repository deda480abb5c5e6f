package inbox

// Metrics is a placeholder until the inbox consumer lands; replaced by the real implementation.
type Metrics struct{}
