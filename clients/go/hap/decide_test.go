package hap

import (
	"context"
	"errors"
	"testing"

	"github.com/hap-operator/hap-operator/clients/go/apis/v1alpha1"
)

func claimWith(gen, observed int64, phase v1alpha1.AccountClaimStatusPhase, conds ...v1alpha1.AccountClaimStatusCondition) *v1alpha1.AccountClaim {
	c := v1alpha1.NewAccountClaim("ns", "c", v1alpha1.AccountClaimSpec{GlobalAccount: "ga", Plan: "aws"})
	c.Generation = gen
	c.Status = &v1alpha1.AccountClaimStatus{ObservedGeneration: &observed, Phase: &phase, Conditions: conds}
	return c
}

func cond(t, status, reason, msg string) v1alpha1.AccountClaimStatusCondition {
	return v1alpha1.AccountClaimStatusCondition{Type: t, Status: status, Reason: reason, Message: msg}
}

func TestDecideReadsTheOperatorsStatus(t *testing.T) {
	bound := claimWith(1, 1, v1alpha1.AccountClaimStatusPhaseBound, cond("Ready", "True", "Bound", "bound"))
	name, ns, typ := "aws-1", "garden-p", "aws"
	bound.Status.CredentialsBindingName, bound.Status.BindingNamespace, bound.Status.HyperscalerType = &name, &ns, &typ
	if b, ce, done := decide(bound, Options{}); !done || ce != nil || b.Name != "aws-1" || b.Namespace != "garden-p" || b.HyperscalerType != "aws" {
		t.Fatalf("bound: %+v %v %v", b, ce, done)
	}
	// A status written for an older generation says nothing about this one.
	if _, _, done := decide(claimWith(2, 1, v1alpha1.AccountClaimStatusPhaseBound), Options{}); done {
		t.Fatal("a stale status was taken as a decision")
	}
	denied := claimWith(1, 1, v1alpha1.AccountClaimStatusPhaseFailed, cond("Ready", "False", "Denied", "rule 2 denies"), cond("Stalled", "True", "Denied", "rule 2 denies"))
	if _, ce, done := decide(denied, Options{WaitWhileStalled: true}); !done || !errors.Is(ce, ErrDenied) || !ce.Final || ce.Message != "rule 2 denies" {
		t.Fatalf("denied: %v %v", ce, done)
	}
	exhausted := claimWith(1, 1, v1alpha1.AccountClaimStatusPhasePending, cond("Ready", "False", "PoolExhausted", "no binding in hyperscalerType=gcp"), cond("Reconciling", "True", "PoolExhausted", ""))
	if _, ce, done := decide(exhausted, Options{}); done || !errors.Is(ce, ErrPoolExhausted) {
		t.Fatalf("exhausted waits: %v %v", ce, done)
	}
	if _, ce, done := decide(exhausted, Options{StopOn: []string{ReasonPoolExhausted}}); !done || !errors.Is(ce, ErrPoolExhausted) || errors.Is(ce, ErrPaused) {
		t.Fatalf("exhausted with StopOn: %v %v", ce, done)
	}
	stalled := claimWith(1, 1, v1alpha1.AccountClaimStatusPhasePending, cond("Ready", "False", "NoMatchingRule", "no entry"), cond("Stalled", "True", "NoMatchingRule", ""))
	if _, ce, done := decide(stalled, Options{}); !done || !errors.Is(ce, ErrNoMatchingRule) || ce.Final {
		t.Fatalf("stalled: %v %v", ce, done)
	}
	if _, _, done := decide(stalled, Options{WaitWhileStalled: true}); done {
		t.Fatal("WaitWhileStalled returned on a stalled reason")
	}
}

func TestAWaitErrorIsBothTheContextErrorAndTheLastReason(t *testing.T) {
	err := error(&WaitError{Namespace: "ns", Name: "c", Err: context.DeadlineExceeded,
		Last: &ClaimError{Reason: ReasonPoolExhausted, Message: "no binding in hyperscalerType=gcp"}})
	var ce *ClaimError
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrPoolExhausted) || !errors.As(err, &ce) || ce.Message == "" {
		t.Fatalf("%v", err)
	}
	if errors.Is(&ClaimError{Reason: "SomethingNew"}, ErrPoolExhausted) {
		t.Fatal("an unknown reason matched a sentinel")
	}
}

func TestOnlyTheSameRequestsClaimIsAdopted(t *testing.T) {
	spec := v1alpha1.AccountClaimSpec{GlobalAccount: "ga", Plan: "aws"}
	found := v1alpha1.NewAccountClaim("ns", "c", spec)
	found.Annotations = map[string]string{AnnotationRequestID: "op-1"}
	if err := adoptable(found, spec, "op-1"); err != nil {
		t.Fatalf("the same request: %v", err)
	}
	if err := adoptable(found, spec, "op-2"); !errors.Is(err, ErrClaimedByAnother) {
		t.Fatalf("another request: %v", err)
	}
	other := v1alpha1.AccountClaimSpec{GlobalAccount: "ga-2", Plan: "aws"}
	if err := adoptable(found, other, "op-1"); !errors.Is(err, ErrSpecMismatch) {
		t.Fatalf("another spec: %v", err)
	}
	found.Annotations = nil
	if err := adoptable(found, spec, "op-1"); !errors.Is(err, ErrClaimedByAnother) {
		t.Fatalf("a claim without a request id: %v", err)
	}
	mine := withRequestID(map[string]string{"team": "a"}, "op-1")
	if mine["team"] != "a" || mine[AnnotationRequestID] != "op-1" {
		t.Fatalf("annotations: %v", mine)
	}
}
