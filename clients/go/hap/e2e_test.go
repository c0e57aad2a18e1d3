//go:build e2e

// End-to-end tests of the client against a real API server with hap-operator running. The
// test that starts them (tests/it/e2e_go_client.rs) prepares a HapConfig and its bindings and
// names them in the environment:
//
//	KUBECONFIG, HAP_GO_CLAIM_NAMESPACE, HAP_GO_BINDING_NAMESPACE, HAP_GO_CONFIG
//
// and a pool `aws` with free bindings, a pool `gcp` with none, a deny entry for global account
// ga-denied, and a tenant policy that allows every ga-* account used here but ga-stranger.
package hap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hap-operator/hap-operator/clients/go/apis/v1alpha1"
	"github.com/hap-operator/hap-operator/clients/go/hap"
)

var bindingsRes = schema.GroupVersionResource{Group: "security.gardener.cloud", Version: "v1alpha1", Resource: "credentialsbindings"}

type env struct {
	claims    *hap.Client
	dyn       dynamic.Interface
	bindingNS string
	config    string
}

func setup(t *testing.T) env {
	t.Helper()
	var missing []string
	get := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			missing = append(missing, k)
		}
		return v
	}
	kc, ns, bns, cfgName := get("KUBECONFIG"), get("HAP_GO_CLAIM_NAMESPACE"), get("HAP_GO_BINDING_NAMESPACE"), get("HAP_GO_CONFIG")
	if len(missing) > 0 {
		t.Fatalf("run by tests/it/e2e_go_client.rs, which sets %v", missing)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return env{claims: hap.NewForDynamic(dyn, ns), dyn: dyn, bindingNS: bns, config: cfgName}
}

func spec(ga, plan string) v1alpha1.AccountClaimSpec {
	pr := "cf-eu11"
	return v1alpha1.AccountClaimSpec{GlobalAccount: ga, Plan: plan, PlatformRegion: &pr}
}

func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func (e env) bindingLabels(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := e.dyn.Resource(bindingsRes).Namespace(e.bindingNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read binding %s: %v", name, err)
	}
	return b.GetLabels()
}

func TestClaimAndWaitReturnsTheBinding(t *testing.T) {
	e := setup(t)
	b, err := e.claims.ClaimAndWait(within(t, time.Minute), "go-bound", spec("ga-bound", "aws"), hap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.Name, "aws-") || b.Namespace != e.bindingNS || b.HyperscalerType != "aws" || b.Decision != "Claimed" {
		t.Fatalf("binding %+v", b)
	}
	if got := e.bindingLabels(t, b.Name)["tenantName"]; got != "ga-bound" {
		t.Fatalf("binding %s has tenantName %q", b.Name, got)
	}
}

func TestClaimAndWaitIsIdempotentOnTheName(t *testing.T) {
	e := setup(t)
	ctx := within(t, 2*time.Minute)
	retry := hap.Options{RequestID: "op-retry"}
	first, err := e.claims.ClaimAndWait(ctx, "go-retry", spec("ga-retry", "aws"), retry)
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Claim.Annotations[hap.AnnotationRequestID]; got != "op-retry" {
		t.Fatalf("the claim carries request id %q", got)
	}
	again, err := e.claims.ClaimAndWait(ctx, "go-retry", spec("ga-retry", "aws"), retry)
	if err != nil {
		t.Fatal(err)
	}
	if again.Claim.UID != first.Claim.UID || again.Name != first.Name {
		t.Fatalf("a retry made another claim or binding: %s %s, then %s %s", first.Claim.UID, first.Name, again.Claim.UID, again.Name)
	}
	// A create whose answer was lost: the claim exists, the caller does not know it.
	made := v1alpha1.NewAccountClaim("", "go-lost", spec("ga-lost", "aws"))
	made.Annotations = map[string]string{hap.AnnotationRequestID: "op-lost"}
	lost, err := e.claims.Create(ctx, made)
	if err != nil {
		t.Fatal(err)
	}
	found, err := e.claims.ClaimAndWait(ctx, "go-lost", spec("ga-lost", "aws"), hap.Options{RequestID: "op-lost"})
	if err != nil {
		t.Fatal(err)
	}
	if found.Claim.UID != lost.UID {
		t.Fatalf("the retry did not find the claim it created: %s, not %s", found.Claim.UID, lost.UID)
	}
	// The name is taken by another request.
	_, err = e.claims.ClaimAndWait(ctx, "go-retry", spec("ga-other", "aws"), hap.Options{})
	if !errors.Is(err, hap.ErrSpecMismatch) || !strings.Contains(err.Error(), "globalAccount=ga-retry") {
		t.Fatalf("a claim of the name with another spec: %v", err)
	}
	// Released, then the name is used again: a new claim (another uid), decided anew.
	if err := e.claims.Release(ctx, "go-retry", hap.ReleaseOptions{UID: first.Claim.UID, Wait: true}); err != nil {
		t.Fatal(err)
	}
	renewed, err := e.claims.ClaimAndWait(ctx, "go-retry", spec("ga-retry", "aws"), retry)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Claim.UID == first.Claim.UID || renewed.Name == first.Name {
		t.Fatalf("the re-created claim: uid %s binding %s (first: %s %s, which is dirty now)", renewed.Claim.UID, renewed.Name, first.Claim.UID, first.Name)
	}
}

func TestAClaimOfAnotherCallerIsNotAdopted(t *testing.T) {
	e := setup(t)
	ctx := within(t, 2*time.Minute)
	mine, err := e.claims.ClaimAndWait(ctx, "go-twice", spec("ga-twice", "aws"), hap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Another caller asks for the same name with the same spec: not its claim, whether it names
	// a request id of its own or none (a new random one).
	for _, opts := range []hap.Options{{}, {RequestID: "op-other"}} {
		other, err := e.claims.ClaimAndWait(ctx, "go-twice", spec("ga-twice", "aws"), opts)
		if err == nil {
			t.Fatalf("another caller adopted claim %s (binding %s) made by the first", other.Claim.UID, mine.Name)
		}
		if !errors.Is(err, hap.ErrClaimedByAnother) || !strings.Contains(err.Error(), mine.Claim.Annotations[hap.AnnotationRequestID]) {
			t.Fatalf("another caller's claim: %v", err)
		}
	}
	// The first caller, with its own id (what its Claimed callback or the claim records), still
	// finds it.
	again, err := e.claims.ClaimAndWait(ctx, "go-twice", spec("ga-twice", "aws"),
		hap.Options{RequestID: mine.Claim.Annotations[hap.AnnotationRequestID]})
	if err != nil || again.Claim.UID != mine.Claim.UID {
		t.Fatalf("the first caller again: %v", err)
	}
}

func TestADeniedClaimIsATypedError(t *testing.T) {
	e := setup(t)
	_, err := e.claims.ClaimAndWait(within(t, time.Minute), "go-denied", spec("ga-denied", "aws"), hap.Options{})
	var ce *hap.ClaimError
	if !errors.Is(err, hap.ErrDenied) || !errors.As(err, &ce) || !ce.Final ||
		!strings.Contains(ce.Message, "plan aws is closed for ga-denied") {
		t.Fatalf("denied: %v", err)
	}
}

func TestATenantThePolicyDoesNotAllowIsATypedError(t *testing.T) {
	e := setup(t)
	_, err := e.claims.ClaimAndWait(within(t, time.Minute), "go-stranger", spec("ga-stranger", "aws"), hap.Options{})
	var ce *hap.ClaimError
	if !errors.Is(err, hap.ErrTenantNotAllowed) || !errors.As(err, &ce) || !ce.Final || !strings.Contains(ce.Message, "go-provisioners") {
		t.Fatalf("tenant not allowed: %v", err)
	}
}

func TestAnExhaustedPoolIsATypedErrorWithTheOperatorsMessage(t *testing.T) {
	e := setup(t)
	_, err := e.claims.ClaimAndWait(within(t, time.Minute), "go-exhausted", spec("ga-exhausted", "gcp"),
		hap.Options{StopOn: []string{hap.ReasonPoolExhausted}})
	var ce *hap.ClaimError
	if !errors.Is(err, hap.ErrPoolExhausted) || !errors.As(err, &ce) || ce.Final || !strings.Contains(ce.Message, "hyperscalerType=gcp") {
		t.Fatalf("exhausted: %v", err)
	}
}

func TestTheContextDeadlineEndsTheWaitWithTheLastReason(t *testing.T) {
	e := setup(t)
	// First until the operator has written its reason (however loaded the machine is), so that
	// the deadline below meets a recorded reason rather than racing the operator's first pass.
	_, err := e.claims.ClaimAndWait(within(t, time.Minute), "go-deadline", spec("ga-deadline", "gcp"),
		hap.Options{RequestID: "op-deadline", StopOn: []string{hap.ReasonPoolExhausted}})
	if !errors.Is(err, hap.ErrPoolExhausted) {
		t.Fatalf("before the deadline: %v", err)
	}
	start := time.Now()
	_, err = e.claims.ClaimAndWait(within(t, 3*time.Second), "go-deadline", spec("ga-deadline", "gcp"), hap.Options{RequestID: "op-deadline"})
	var we *hap.WaitError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, hap.ErrPoolExhausted) || !errors.As(err, &we) ||
		!strings.Contains(err.Error(), "hyperscalerType=gcp") {
		t.Fatalf("deadline: %v", err)
	}
	if waited := time.Since(start); waited < 3*time.Second || waited > 8*time.Second {
		t.Fatalf("waited %v for a deadline of 3s", waited)
	}
}

func TestAPausedConfigIsATypedErrorThenTheClaimBinds(t *testing.T) {
	e := setup(t)
	ctx := within(t, 2*time.Minute)
	e.setPaused(t, ctx, true)
	t.Cleanup(func() { e.setPaused(t, context.Background(), false) })
	_, err := e.claims.ClaimAndWait(ctx, "go-paused", spec("ga-paused", "aws"), hap.Options{RequestID: "op-paused", StopOn: []string{hap.ReasonPaused}})
	if !errors.Is(err, hap.ErrPaused) {
		t.Fatalf("paused: %v", err)
	}
	e.setPaused(t, ctx, false)
	b, err := e.claims.ClaimAndWait(ctx, "go-paused", spec("ga-paused", "aws"), hap.Options{RequestID: "op-paused"})
	if err != nil || !strings.HasPrefix(b.Name, "aws-") {
		t.Fatalf("after the pause: %+v %v", b, err)
	}
}

// setPaused sets spec.paused and waits until the operator has read that generation.
func (e env) setPaused(t *testing.T, ctx context.Context, paused bool) {
	t.Helper()
	configs := e.dyn.Resource(v1alpha1.HapConfigs)
	patch := []byte(`{"spec":{"paused":false}}`)
	if paused {
		patch = []byte(`{"spec":{"paused":true}}`)
	}
	cfg, err := configs.Patch(ctx, e.config, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("pause %v: %v", paused, err)
	}
	for {
		cur, err := configs.Get(ctx, e.config, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status, _ := cur.Object["status"].(map[string]any)
		if g, ok := status["observedGeneration"].(int64); ok && g >= cfg.GetGeneration() {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the operator did not observe generation %d of %s", cfg.GetGeneration(), e.config)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestReleaseMarksTheBindingDirtyAndTheClaimGoes(t *testing.T) {
	e := setup(t)
	ctx := within(t, time.Minute)
	b, err := e.claims.ClaimAndWait(ctx, "go-release", spec("ga-release", "aws"), hap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.claims.Release(ctx, "go-release", hap.ReleaseOptions{UID: b.Claim.UID, Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.claims.Get(ctx, "go-release"); !apierrors.IsNotFound(err) {
		t.Fatalf("the claim is still there: %v", err)
	}
	if l := e.bindingLabels(t, b.Name); l["dirty"] != "true" || l["tenantName"] != "ga-release" {
		t.Fatalf("released binding %s: %v", b.Name, l)
	}
	// Releasing again is a no-op.
	if err := e.claims.Release(ctx, "go-release", hap.ReleaseOptions{Wait: true}); err != nil {
		t.Fatal(err)
	}
}

// A claim still being deleted under the name (its release not finished) is waited out, and the
// claim is then created anew: another object, decided anew.
func TestAClaimBeingDeletedIsWaitedOutThenCreatedAnew(t *testing.T) {
	e := setup(t)
	ctx := within(t, 2*time.Minute)
	first, err := e.claims.ClaimAndWait(ctx, "go-held", spec("ga-held", "aws"), hap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// A finalizer of the test's own keeps the claim in deletion after the operator's release.
	claims := e.dyn.Resource(v1alpha1.AccountClaims).Namespace(e.claims.Namespace())
	hold := []byte(`[{"op":"add","path":"/metadata/finalizers/-","value":"test.hap-operator/hold"}]`)
	if _, err := claims.Patch(ctx, "go-held", types.JSONPatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.claims.Delete(ctx, "go-held", first.Claim.UID); err != nil {
		t.Fatal(err)
	}
	type result struct {
		b   *hap.Binding
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := e.claims.ClaimAndWait(ctx, "go-held", spec("ga-held", "aws"), hap.Options{})
		done <- result{b, err}
	}()
	// The operator releases the binding and drops its finalizer; only the test's holds the claim.
	for {
		cur, err := e.claims.Get(ctx, "go-held")
		if err != nil {
			t.Fatal(err)
		}
		if len(cur.Finalizers) == 1 && cur.Finalizers[0] == "test.hap-operator/hold" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the operator kept its finalizer: %v", cur.Finalizers)
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case r := <-done:
		t.Fatalf("ClaimAndWait returned while the old claim was still being deleted: %+v %v", r.b, r.err)
	default:
	}
	unhold := []byte(`[{"op":"replace","path":"/metadata/finalizers","value":[]}]`)
	if _, err := claims.Patch(ctx, "go-held", types.JSONPatchType, unhold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.b.Claim.UID == first.Claim.UID || r.b.Name == first.Name {
		t.Fatalf("the claim created anew: uid %s binding %s (first: %s %s, released dirty)", r.b.Claim.UID, r.b.Name, first.Claim.UID, first.Name)
	}
}

func TestAClaimNoRuleMatchesIsATypedErrorAtOnce(t *testing.T) {
	e := setup(t)
	_, err := e.claims.ClaimAndWait(within(t, time.Minute), "go-norule", spec("ga-norule", "azure"), hap.Options{})
	var ce *hap.ClaimError
	if !errors.Is(err, hap.ErrNoMatchingRule) || !errors.As(err, &ce) || !ce.Stalled || ce.Final {
		t.Fatalf("no matching rule: %v", err)
	}
}

// What the API server returns of the operator's HapConfig and of a bound claim, status included,
// decodes into the generated types with no field left over.
func TestTheServersObjectsDecodeIntoTheTypesWithNothingLeftOver(t *testing.T) {
	e := setup(t)
	ctx := within(t, time.Minute)
	if _, err := e.claims.ClaimAndWait(ctx, "go-decode", spec("ga-bound", "aws"), hap.Options{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := e.dyn.Resource(v1alpha1.HapConfigs).Get(ctx, e.config, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := e.dyn.Resource(v1alpha1.AccountClaims).Namespace(e.claims.Namespace()).Get(ctx, "go-decode", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		obj  interface{ MarshalJSON() ([]byte, error) }
		into any
	}{{cfg, &v1alpha1.HapConfig{}}, {claim, &v1alpha1.AccountClaim{}}} {
		raw, err := c.obj.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(c.into); err != nil {
			t.Fatalf("%T: %v\n%s", c.into, err, raw)
		}
	}
}

// A claim deleted by someone else while ClaimAndWait waits on it ends the wait at once, even
// while another finalizer keeps the object.
func TestAClaimDeletedWhileWaitingEndsTheWait(t *testing.T) {
	e := setup(t)
	ctx := within(t, time.Minute)
	_, err := e.claims.ClaimAndWait(ctx, "go-gone", spec("ga-gone", "gcp"), hap.Options{RequestID: "op-gone", StopOn: []string{hap.ReasonPoolExhausted}})
	if !errors.Is(err, hap.ErrPoolExhausted) {
		t.Fatal(err)
	}
	claims := e.dyn.Resource(v1alpha1.AccountClaims).Namespace(e.claims.Namespace())
	hold := []byte(`[{"op":"add","path":"/metadata/finalizers/-","value":"test.hap-operator/hold"}]`)
	if _, err := claims.Patch(ctx, "go-gone", types.JSONPatchType, hold, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unhold := []byte(`[{"op":"replace","path":"/metadata/finalizers","value":[]}]`)
		_, _ = claims.Patch(context.Background(), "go-gone", types.JSONPatchType, unhold, metav1.PatchOptions{})
	})
	done := make(chan error, 1)
	waiting := make(chan struct{})
	go func() {
		_, err := e.claims.ClaimAndWait(ctx, "go-gone", spec("ga-gone", "gcp"),
			hap.Options{RequestID: "op-gone", Claimed: func(*v1alpha1.AccountClaim) { close(waiting) }})
		done <- err
	}()
	// Deleted only once the waiter holds the claim (a deletion that came first would be waited
	// out, and the claim created anew).
	select {
	case <-waiting:
	case err := <-done:
		t.Fatalf("ClaimAndWait returned before it held the claim: %v", err)
	}
	if err := e.claims.Delete(ctx, "go-gone", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, hap.ErrClaimDeleted) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("deleted while waiting: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ClaimAndWait went on waiting on a claim being deleted")
	}
}
