// mpi-operator: github.com/kubeflow/mpi-operator v0.6.0's controller (cmd/mpi-operator/main.go and
// cmd/mpi-operator/app/server.go) for a real member cluster run out of cluster (issue 28).
//
// It runs upstream's MPIJob controller (controller.NewMPIJobController over the same informers, Run with
// --threadiness workers) exactly as upstream's app.Run does, with three differences only:
//   - the health endpoint (/healthz, and /readyz once the informers have synced) listens on
//     --health-probe-bind-address (loopback) instead of upstream's fixed ":8080", so that several members
//     on one machine can each run one; /metrics is served there too (upstream: --monitoring-port on all
//     interfaces);
//   - no leader election: one process per member (upstream elects a leader through a Lease in
//     --lock-namespace even with one replica);
//   - no volcano / scheduler-plugins gang scheduling: --gang-scheduling is accepted only empty (the hub
//     creates the member's PodGroup: docs, opmode), so their clientsets are not created either.
package main

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeapiserver "k8s.io/apiserver/pkg/server"
	kubeinformers "k8s.io/client-go/informers"
	kubeclientset "k8s.io/client-go/kubernetes"
	clientgokubescheme "k8s.io/client-go/kubernetes/scheme"
	restclientset "k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog"

	"github.com/kubeflow/mpi-operator/cmd/mpi-operator/app/options"
	mpijobclientset "github.com/kubeflow/mpi-operator/pkg/client/clientset/versioned"
	kubeflowscheme "github.com/kubeflow/mpi-operator/pkg/client/clientset/versioned/scheme"
	informers "github.com/kubeflow/mpi-operator/pkg/client/informers/externalversions"
	controllersv1 "github.com/kubeflow/mpi-operator/pkg/controller"
	"github.com/kubeflow/mpi-operator/pkg/version"
)

func main() {
	klog.InitFlags(nil)
	s := options.NewServerOption()
	s.AddFlags(flag.CommandLine)
	var probeAddr string
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8080",
		"The address /healthz, /readyz and /metrics listen on.")
	flag.Parse()

	if s.PrintVersion {
		version.PrintVersionAndExit("v2")
	}
	if s.GangSchedulingName != "" {
		klog.Errorf("--gang-scheduling must be empty: the member's scheduler does gang scheduling")
		os.Exit(2)
	}
	if s.MonitoringPort != 0 {
		klog.Errorf("--monitoring-port is not served: /metrics is on --health-probe-bind-address")
		os.Exit(2)
	}
	if err := run(s, probeAddr); err != nil {
		klog.Fatalf("%v", err)
	}
}

func run(opt *options.ServerOption, probeAddr string) error {
	namespace := opt.Namespace
	klog.Infof("%+v", version.Info("v2"))
	klog.Infof("Server options: %+v", opt)
	stopCh := kubeapiserver.SetupSignalHandler()

	if len(os.Getenv("KUBECONFIG")) > 0 {
		opt.Kubeconfig = os.Getenv("KUBECONFIG")
	}
	cfg, err := clientcmd.BuildConfigFromFlags(opt.MasterURL, opt.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = float32(opt.QPS)
	cfg.Burst = opt.Burst
	kubeClient, err := kubeclientset.NewForConfig(restclientset.AddUserAgent(cfg, "mpi-operator"))
	if err != nil {
		return err
	}
	mpiJobClient, err := mpijobclientset.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if _, err := mpiJobClient.KubeflowV2beta1().MPIJobs(namespace).List(context.TODO(), metav1.ListOptions{}); err != nil {
		var status *apierrors.StatusError
		if errors.As(err, &status) && apierrors.IsNotFound(err) {
			klog.Info("CRD doesn't exist. Exiting")
			os.Exit(1)
		}
		klog.Error(err)
	}
	if err := kubeflowscheme.AddToScheme(clientgokubescheme.Scheme); err != nil {
		return err
	}

	var kubeOpts []kubeinformers.SharedInformerOption
	var kubeflowOpts []informers.SharedInformerOption
	if namespace != corev1.NamespaceAll {
		kubeOpts = append(kubeOpts, kubeinformers.WithNamespace(namespace))
		kubeflowOpts = append(kubeflowOpts, informers.WithNamespace(namespace))
	}
	kubeInformerFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kubeClient, 0, kubeOpts...)
	kubeflowInformerFactory := informers.NewSharedInformerFactoryWithOptions(mpiJobClient, 0, kubeflowOpts...)
	controller, err := controllersv1.NewMPIJobController(
		kubeClient, mpiJobClient, nil, nil,
		kubeInformerFactory.Core().V1().ConfigMaps(),
		kubeInformerFactory.Core().V1().Secrets(),
		kubeInformerFactory.Core().V1().Services(),
		kubeInformerFactory.Batch().V1().Jobs(),
		kubeInformerFactory.Core().V1().Pods(),
		kubeInformerFactory.Scheduling().V1().PriorityClasses(),
		kubeflowInformerFactory.Kubeflow().V2beta1().MPIJobs(),
		namespace, opt.GangSchedulingName)
	if err != nil {
		return err
	}

	var synced atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !synced.Load() {
			http.Error(w, "informers not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.Handler())
	go func() {
		klog.Infof("Start listening to %s for health check", probeAddr)
		if err := (&http.Server{Addr: probeAddr, Handler: mux}).ListenAndServe(); err != nil {
			klog.Fatalf("Error starting server for health check: %v", err)
		}
	}()

	kubeInformerFactory.Start(stopCh)
	kubeflowInformerFactory.Start(stopCh)
	for typ, ok := range kubeInformerFactory.WaitForCacheSync(stopCh) {
		if !ok {
			return errors.New("informer cache of " + typ.String() + " did not sync")
		}
	}
	for typ, ok := range kubeflowInformerFactory.WaitForCacheSync(stopCh) {
		if !ok {
			return errors.New("informer cache of " + typ.String() + " did not sync")
		}
	}
	synced.Store(true)
	return controller.Run(opt.Threadiness, stopCh)
}
