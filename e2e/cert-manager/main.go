// Command hap-cert-manager runs cert-manager's own controllers and its CA injector as plain
// processes against a test control plane, for hap-operator's end-to-end tests.
//
// The Go module proxy serves github.com/cert-manager/cert-manager but not its command modules
// (cmd/controller, cmd/cainjector are separate modules it does not list), so this file only wires
// the upstream packages together: every decision about issuing, renewing and injecting is made by
// cert-manager's code. Only the controllers the webhook certificate chain needs are linked in:
// issuers (SelfSigned and CA), the certificates state machine, the request approver and the
// SelfSigned and CA signers, plus the injector for webhook configurations.
//
//	hap-cert-manager controller --kubeconfig K --namespace NS
//	hap-cert-manager cainjector --kubeconfig K --namespace NS [--feature-gates G=false]
//
// Both watch only NS (tests isolate by namespace on a shared control plane) and never take a
// leader-election lease.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
	"golang.org/x/sync/errgroup"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hap-cert-manager controller|cainjector --kubeconfig FILE --namespace NS")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig of the control plane")
	namespace := fs.String("namespace", "", "the only namespace watched")
	gates := fs.String("feature-gates", "", "cert-manager feature gates, e.g. CAInjectorMerging=false")
	_ = fs.Parse(os.Args[2:])
	if *gates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(*gates); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	if *kubeconfig == "" || *namespace == "" {
		fmt.Fprintln(os.Stderr, "--kubeconfig and --namespace are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	ctrl.SetLogger(klog.Background())
	var err error
	switch os.Args[1] {
	case "controller":
		err = runController(ctx, *kubeconfig, *namespace)
	case "cainjector":
		err = runCAInjector(ctx, *kubeconfig, *namespace)
	default:
		err = fmt.Errorf("unknown component %q (controller or cainjector)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// runController constructs every controller linked in, starts the shared informers they
// registered, and runs them until ctx ends.
func runController(ctx context.Context, kubeconfig, namespace string) error {
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		Namespace:          namespace,
		KubernetesAPIQPS:   50,
		KubernetesAPIBurst: 100,
		IssuerOptions:      controllerpkg.IssuerOptions{ClusterResourceNamespace: namespace},
		CertificateOptions: controllerpkg.CertificateOptions{
			// v1.20 has no maximum to set: it caps the backoff at a fixed 32 h (the maximum set here
			// for v1.21).
			CertificateRequestMinimumBackoffDuration: time.Hour,
		},
	})
	if err != nil {
		return err
	}
	names := make([]string, 0, len(controllerpkg.Known()))
	for name := range controllerpkg.Known() {
		names = append(names, name)
	}
	sort.Strings(names)
	g, gctx := errgroup.WithContext(ctx)
	for _, name := range names {
		c, err := controllerpkg.Known()[name](factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		klog.InfoS("starting controller", "name", name)
		g.Go(func() error { return c.Run(2, gctx) })
	}
	shared, err := factory.Build("informers")
	if err != nil {
		return err
	}
	shared.KubeSharedInformerFactory.Start(gctx.Done())
	shared.SharedInformerFactory.Start(gctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())
	return g.Wait()
}

// runCAInjector runs the injector for webhook configurations with the Certificate data source
// (cert-manager.io/inject-ca-from), as cert-manager's own cainjector does.
func runCAInjector(ctx context.Context, kubeconfig, namespace string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	// The injector's field manager (server-side apply) is derived from the user agent.
	cfg = util.RestConfigWithUserAgent(cfg, "cainjector")
	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	utilruntime.Must(admissionv1.AddToScheme(scheme))
	utilruntime.Must(apiextv1.AddToScheme(scheme))
	utilruntime.Must(apiregv1.AddToScheme(scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}},
		// Secrets are read directly, never cached whole (cert-manager's cainjector does the same).
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    namespace,
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
		},
	})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
