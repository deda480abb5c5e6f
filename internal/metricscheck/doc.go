// Package metricscheck reads a Prometheus text exposition (a /metrics
// scrape) and checks it against the metrics sagaflow promises operators:
// the names in Required, and the metric names a Grafana dashboard's
// queries use. Its tests run the demo workload with a live /metrics
// endpoint, lint the scrape with `promtool check metrics`, and validate
// deploy/grafana/sagaflow.json against it.
//
// The same checks are available by hand against a running `serve` or
// `participants` process with scripts/check-metrics.sh.
package metricscheck
