"""What the gateway tells others about itself: Prometheus metrics, and the in-flight counters the autoscaler reads."""
