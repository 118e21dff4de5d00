// Command localmodelnode runs KServe's LocalModel node agent (the LocalModelNode reconciler of
// github.com/kserve/kserve/pkg/controller/v1alpha1/localmodelnode, unchanged) for one kwok node of
// the test control plane.
//
// KServe v0.20's own cmd/localmodelnode serves metrics on :8080 and probes on :8081 with no flag
// to move them: in a cluster each agent is a DaemonSet pod with a network namespace of its own.
// Here every agent shares the host's, beside KServe's router (also :8080), so this entry point
// takes the probe address as a flag and turns metrics off. Everything else is as KServe's: the
// node comes from NODE_NAME, the models live under /mnt/models (testenv gives each agent a
// private /mnt through a mount namespace), the cluster from --kubeconfig.
package main

import (
	"flag"
	"os"

	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kserve/kserve/pkg/controller/v1alpha1/localmodelnode"
	kservescheme "github.com/kserve/kserve/pkg/scheme"
)

func main() {
	probeAddr := flag.String("health-probe-addr", "127.0.0.1:0", "address of /healthz and /readyz")
	logOptions := zap.Options{}
	logOptions.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOptions)))
	log := ctrl.Log.WithName("localmodelnode")
	if os.Getenv("NODE_NAME") == "" {
		log.Info("NODE_NAME is not set: the agent would reconcile no LocalModelNode")
		os.Exit(2)
	}
	fail := func(err error, what string) {
		log.Error(err, what)
		os.Exit(1)
	}

	cfg, err := config.GetConfig()
	if err != nil {
		fail(err, "no cluster configuration")
	}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fail(err, "no clientset")
	}
	mgr, err := manager.New(cfg, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: *probeAddr,
	})
	if err != nil {
		fail(err, "no manager")
	}
	if err := kservescheme.AddControllerAPIs(mgr.GetScheme()); err != nil {
		fail(err, "KServe's types not registered")
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		fail(err, "no health check")
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		fail(err, "no readiness check")
	}
	reconciler := &localmodelnode.LocalModelNodeReconciler{
		Client:    mgr.GetClient(),
		Clientset: clientset,
		Log:       ctrl.Log.WithName("v1alpha1Controllers").WithName("LocalModelNode"),
		Scheme:    mgr.GetScheme(),
	}
	if err := reconciler.SetupWithManager(mgr); err != nil {
		fail(err, "LocalModelNode controller not set up")
	}
	if err := mgr.Start(signals.SetupSignalHandler()); err != nil {
		fail(err, "manager stopped")
	}
}
