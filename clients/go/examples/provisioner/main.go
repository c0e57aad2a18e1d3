// Command provisioner does what Kyma Environment Broker's credential steps do, through
// hap-operator: on provisioning (its Resolve_Credentials_Binding step) it claims an account for a
// global account, plan and region, waits for the operator's decision, and reads the
// CredentialsBinding the claim names (never the Secret); on deprovisioning (its
// Free_Credentials_Binding step, after the cluster is gone) it releases the claim.
//
//	provisioner provision   -claim-namespace NS -instance ID -global-account GA -plan aws -platform-region cf-eu11 [-cluster-region R] [-timeout 1m]
//	provisioner deprovision -claim-namespace NS -instance ID [-timeout 10m]
//
// It prints one JSON object on stdout; exit code 0 on success, 2 on a refusal (denied, tenant not
// allowed, stalled), 3 when the timeout ended the wait, 1 on any other error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hap-operator/hap-operator/clients/go/apis/v1alpha1"
	"github.com/hap-operator/hap-operator/clients/go/hap"
)

var credentialsBindings = schema.GroupVersionResource{Group: "security.gardener.cloud", Version: "v1alpha1", Resource: "credentialsbindings"}

// Result is what provision prints.
type Result struct {
	Claim    string `json:"claim"`
	ClaimUID string `json:"claimUID,omitempty"`
	Binding  string `json:"binding,omitempty"`
	// Namespace is the binding's namespace (the Gardener project's).
	Namespace string `json:"namespace,omitempty"`
	// ProviderType is the binding's provider.type: the hyperscaler the cluster runs on.
	ProviderType string `json:"providerType,omitempty"`
	// CredentialsRef is the binding's credentialsRef: what the cluster's credentials are.
	CredentialsRef map[string]any `json:"credentialsRef,omitempty"`
	Reason         string         `json:"reason,omitempty"`
	Message        string         `json:"message,omitempty"`
	Error          string         `json:"error,omitempty"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: provisioner provision|deprovision [flags]")
		os.Exit(1)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster with the AccountClaims")
	garden := fs.String("garden-kubeconfig", "", "kubeconfig of the garden with the bindings (default: -kubeconfig)")
	ns := fs.String("claim-namespace", "", "namespace of the AccountClaims (the operator's --claim-namespace)")
	instance := fs.String("instance", "", "the service instance ID: the claim's name, so that a retried step finds its claim")
	operation := fs.String("operation", "", "the provisioning operation ID: the claim's request id, so that only this operation's retries adopt the claim (default: -instance)")
	ga := fs.String("global-account", "", "the tenant (BTP global account)")
	sub := fs.String("subaccount", "", "the BTP subaccount, for the record")
	plan := fs.String("plan", "", "the service plan (aws, azure, gcp, trial, ...)")
	pr := fs.String("platform-region", "", "the BTP platform region (cf-eu11, ...)")
	cr := fs.String("cluster-region", "", "the hyperscaler region of the cluster")
	shoot := fs.String("shoot", "", "the Shoot that will use the binding (counted by the operator)")
	timeout := fs.Duration("timeout", time.Minute, "how long to wait for the operator")
	failFast := fs.Bool("fail-when-exhausted", false, "return PoolExhausted at once instead of waiting for a binding")
	_ = fs.Parse(os.Args[2:])

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	exitOn(Result{Claim: *instance}, err)
	claims, err := hap.New(cfg, *ns)
	exitOn(Result{Claim: *instance}, err)
	switch os.Args[1] {
	case "provision":
		spec := v1alpha1.AccountClaimSpec{GlobalAccount: *ga, Plan: *plan,
			Subaccount: opt(*sub), PlatformRegion: opt(*pr), ClusterRegion: opt(*cr), ShootName: opt(*shoot)}
		gardenCfg := cfg
		if *garden != "" {
			gardenCfg, err = clientcmd.BuildConfigFromFlags("", *garden)
			exitOn(Result{Claim: *instance}, err)
		}
		requestID := *operation
		if requestID == "" {
			requestID = *instance
		}
		res, err := provision(ctx, claims, gardenCfg, *instance, requestID, spec, *failFast)
		exitOn(res, err)
		emit(res, 0)
	case "deprovision":
		err := claims.Release(ctx, *instance, hap.ReleaseOptions{Wait: true})
		exitOn(Result{Claim: *instance}, err)
		emit(Result{Claim: *instance}, 0)
	default:
		fmt.Fprintf(os.Stderr, "unknown command %q: provision or deprovision\n", os.Args[1])
		os.Exit(1)
	}
}

// provision claims, waits, and reads the binding the claim names.
func provision(ctx context.Context, claims *hap.Client, garden *rest.Config, instance, requestID string,
	spec v1alpha1.AccountClaimSpec, failFast bool) (Result, error) {
	res := Result{Claim: instance}
	opts := hap.Options{RequestID: requestID}
	if failFast {
		opts.StopOn = []string{hap.ReasonPoolExhausted}
	}
	b, err := claims.ClaimAndWait(ctx, instance, spec, opts)
	if err != nil {
		return res, err
	}
	res.ClaimUID, res.Binding, res.Namespace = string(b.Claim.UID), b.Name, b.Namespace
	dyn, err := dynamic.NewForConfig(garden)
	if err != nil {
		return res, err
	}
	obj, err := dyn.Resource(credentialsBindings).Namespace(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return res, fmt.Errorf("read CredentialsBinding %s/%s: %w", b.Namespace, b.Name, err)
	}
	res.ProviderType, _, _ = unstructuredString(obj.Object, "provider", "type")
	if ref, ok := obj.Object["credentialsRef"].(map[string]any); ok {
		res.CredentialsRef = ref
	}
	return res, nil
}

func unstructuredString(m map[string]any, path ...string) (string, bool, error) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = mm[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}

func exitOn(res Result, err error) {
	if err == nil {
		return
	}
	res.Error = err.Error()
	var ce *hap.ClaimError
	if errors.As(err, &ce) {
		res.Reason, res.Message = ce.Reason, ce.Message
	}
	var we *hap.WaitError
	switch {
	case errors.As(err, &we):
		emit(res, 3)
	case ce != nil:
		emit(res, 2)
	default:
		emit(res, 1)
	}
}

func emit(res Result, code int) {
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	os.Exit(code)
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
