// Wrapper module: builds github.com/prometheus/prometheus/cmd/promtool from the Go module proxy for the alert-rule tests.
module reward-operator.dev/testenv/promtool

go 1.26.0
