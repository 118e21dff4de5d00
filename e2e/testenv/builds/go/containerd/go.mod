// Wrapper module: builds containerd (daemon, runc shim, ctr) from the Go module proxy for the test bed's real node.
module reward-operator.dev/testenv/containerd

go 1.26.6

require github.com/containerd/containerd/v2 v2.4.2 // indirect
