// training-operator: github.com/kubeflow/training-operator v1.8.1's controller manager
// (cmd/training-operator.v1/main.go) for a real member cluster run out of cluster (issue 28).
//
// It registers the upstream reconcilers and validating webhooks of the enabled kinds
// exactly as upstream's main does (controllerv1.SupportedSchemeReconciler,
// webhooks.SupportedSchemeWebhook; defaults are applied by the reconcilers themselves,
// r.Scheme.Default, as upstream), with two differences only:
//   - no cert.ManageCerts: upstream's cert-controller rotator keeps a Secret in the
//     operator's namespace and patches the caBundle of the in-cluster webhook Service's
//     ValidatingWebhookConfiguration. Here the webhook server serves a certificate the
//     member's CA signed (--webhook-cert-dir) on loopback (--webhook-host/--webhook-port),
//     and the member registers upstream's ValidatingWebhookConfiguration with a URL.
//   - no volcano / scheduler-plugins gang scheduling: --gang-scheduler-name is accepted
//     only empty (the hub creates the member's PodGroup: docs, opmode), so the upstream
//     scheme registrations of those PodGroup APIs are not needed either.
package main

import (
	"errors"
	"flag"
	"net/http"
	"os"

	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	kubeflowv1 "github.com/kubeflow/training-operator/pkg/apis/kubeflow.org/v1"
	"github.com/kubeflow/training-operator/pkg/config"
	controllerv1 "github.com/kubeflow/training-operator/pkg/controller.v1"
	"github.com/kubeflow/training-operator/pkg/controller.v1/common"
	"github.com/kubeflow/training-operator/pkg/webhooks"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(kubeflowv1.AddToScheme(scheme))
}

func main() {
	var metricsAddr, probeAddr, webhookHost, webhookCertDir, gangSchedulerName string
	var webhookPort, controllerThreads int
	var enabledSchemes controllerv1.EnabledSchemes

	flag.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:0", "The address the metric endpoint binds to.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:0", "The address the probe endpoint binds to.")
	flag.Var(&enabledSchemes, "enable-scheme", "Enable scheme(s) as --enable-scheme=tfjob --enable-scheme=pytorchjob (required).")
	flag.StringVar(&gangSchedulerName, "gang-scheduler-name", "", "Must be empty: the member's own scheduler does gang scheduling.")
	flag.IntVar(&controllerThreads, "controller-threads", 1, "Number of worker threads used by the controller.")
	flag.StringVar(&webhookHost, "webhook-host", "127.0.0.1", "The address the webhook server binds to.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Endpoint port for the webhook server.")
	flag.StringVar(&webhookCertDir, "webhook-cert-dir", "", "Folder of the webhook server's tls.crt and tls.key (required).")
	flag.StringVar(&config.Config.PyTorchInitContainerImage, "pytorch-init-container-image",
		config.PyTorchInitContainerImageDefault, "The image for pytorch init container")
	flag.StringVar(&config.Config.PyTorchInitContainerTemplateFile, "pytorch-init-container-template-file",
		config.PyTorchInitContainerTemplateFileDefault, "The template file for pytorch init container")
	flag.IntVar(&config.Config.PyTorchInitContainerMaxTries, "pytorch-init-container-max-tries",
		config.PyTorchInitContainerMaxTriesDefault, "The number of tries for the pytorch init container")
	flag.StringVar(&config.Config.MPIKubectlDeliveryImage, "mpi-kubectl-delivery-image",
		config.MPIKubectlDeliveryImageDefault, "The image for mpi launcher init container")
	opts := zap.Options{Development: true, StacktraceLevel: zapcore.DPanicLevel}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	if gangSchedulerName != "" {
		setupLog.Error(errors.New("--gang-scheduler-name must be empty"), "the member's scheduler does gang scheduling")
		os.Exit(2)
	}
	if enabledSchemes.Empty() || webhookCertDir == "" {
		setupLog.Error(errors.New("--enable-scheme and --webhook-cert-dir are required"), "bad flags")
		os.Exit(2)
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: webhookHost, Port: webhookPort, CertDir: webhookCertDir}),
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         false,
	})
	if err != nil {
		setupLog.Error(err, "unable to start manager")
		os.Exit(1)
	}

	gangSchedulingSetupFunc := common.GenNonGangSchedulerSetupFunc()
	for _, s := range enabledSchemes {
		setupReconcilerFunc, ok := controllerv1.SupportedSchemeReconciler[s]
		if !ok {
			setupLog.Error(errors.New("scheme is not supported"), "failed to set up controllers", "scheme", s)
			os.Exit(1)
		}
		if err := setupReconcilerFunc(mgr, gangSchedulingSetupFunc, controllerThreads); err != nil {
			setupLog.Error(err, "unable to create controller", "scheme", s)
			os.Exit(1)
		}
		setupWebhookFunc, ok := webhooks.SupportedSchemeWebhook[s]
		if !ok {
			setupLog.Error(errors.New("scheme is not supported"), "failed to set up webhooks", "scheme", s)
			os.Exit(1)
		}
		if err := setupWebhookFunc(mgr); err != nil {
			setupLog.Error(err, "unable to start webhook server", "scheme", s)
			os.Exit(1)
		}
	}

	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	// ready once the webhook server listens, as upstream's readyz
	if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
		return mgr.GetWebhookServer().StartedChecker()(req)
	}); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}

	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "problem running manager")
		os.Exit(1)
	}
}
