// Wrapper module: builds the CNI plugins the real node's pods use (bridge, host-local, portmap, loopback) from the Go module proxy.
module reward-operator.dev/testenv/cni

go 1.26.8

require github.com/containernetworking/plugins v1.10.0 // indirect
