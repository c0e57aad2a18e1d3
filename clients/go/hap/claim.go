package hap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/hap-operator/hap-operator/clients/go/apis/v1alpha1"
)

// Binding is the CredentialsBinding the operator chose for a claim. The cluster's Shoot names it
// in spec.credentialsBindingName; its credentials are what the binding references (read the
// binding, never the Secret: the provisioner needs no access to credentials).
type Binding struct {
	Name, Namespace string
	// The pool: hyperscalerType and its euAccess/shared variant.
	HyperscalerType  string
	EUAccess, Shared bool
	// Decision says how the binding was chosen (Claimed, Reused, SharedLeastUsed, ...).
	Decision string
	// Claim is the bound claim as last read; its UID identifies it for Release.
	Claim *v1alpha1.AccountClaim
}

// AnnotationRequestID names the request that made a claim. ClaimAndWait sets it on the claim it
// creates and adopts an existing claim of the name only when it carries the caller's request id:
// a same-name claim with the same spec made by another caller is not the caller's.
const AnnotationRequestID = "accountpool.io/request-id"

// Options tune ClaimAndWait.
type Options struct {
	// RequestID identifies the caller's request across its attempts (KEB: the provisioning
	// operation's ID). A claim of the name is adopted only when its AnnotationRequestID is this
	// id; a retry of a create whose answer was lost finds its own claim so. Empty: a new random
	// id for this call, so that only the same call's retries adopt; a caller that retries in a
	// later call (a restarted step) must pass a stable id.
	RequestID string
	// Labels and Annotations are set on a claim ClaimAndWait creates (an existing claim keeps
	// its own).
	Labels, Annotations map[string]string
	// StopOn lists reasons the operator retries (PoolExhausted, Paused, ConfigMissing, ...) that
	// should end the wait with a *ClaimError at once instead of waiting for ctx to end.
	StopOn []string
	// WaitWhileStalled keeps waiting on reasons only a person fixes (NoMatchingRule,
	// ConfigInvalid, UnknownPlan, ...; the claim binds when the HapConfig is fixed) instead of
	// returning them at once.
	WaitWhileStalled bool
	// RetryInterval is the pause between attempts after an API error (default 1s).
	RetryInterval time.Duration
	// Claimed, if set, is called once with the claim ClaimAndWait created or found, before it
	// waits: a provisioner can record the claim's UID (for Release) before a long wait.
	Claimed func(*v1alpha1.AccountClaim)
}

// ClaimAndWait creates the AccountClaim name for spec, or finds the one a previous attempt
// created (a retry after a lost response), and waits until the operator decides:
//   - bound: the Binding;
//   - refused: a *ClaimError (errors.Is with ErrDenied, ErrTenantNotAllowed, ...), at once for
//     final and stalled reasons, and for reasons in opts.StopOn;
//   - ctx ends first: a *WaitError wrapping ctx.Err() and the last reason seen.
//
// A claim of that name with another spec is ErrSpecMismatch, one with the same spec made by
// another request (another opts.RequestID) is ErrClaimedByAnother; one being deleted (a release
// of an earlier request) is waited out and then created anew.
func (c *Client) ClaimAndWait(ctx context.Context, name string, spec v1alpha1.AccountClaimSpec, opts Options) (*Binding, error) {
	if opts.RequestID == "" {
		id, err := newRequestID()
		if err != nil {
			return nil, fmt.Errorf("hap: a request id for AccountClaim %s/%s: %w", c.namespace, name, err)
		}
		opts.RequestID = id
	}
	claim, err := c.ensure(ctx, name, spec, opts)
	if err != nil {
		return nil, err
	}
	if opts.Claimed != nil {
		opts.Claimed(claim)
	}
	return c.waitDecision(ctx, claim, opts)
}

// newRequestID is 128 random bits, hex.
func newRequestID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// withRequestID is a copy of the caller's annotations with the request id (the caller's map is
// not changed).
func withRequestID(annotations map[string]string, id string) map[string]string {
	out := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		out[k] = v
	}
	out[AnnotationRequestID] = id
	return out
}

// adoptable says whether a claim found under the name is the caller's: the same spec, made by
// the same request.
func adoptable(found *v1alpha1.AccountClaim, spec v1alpha1.AccountClaimSpec, requestID string) error {
	if !reflect.DeepEqual(found.Spec, spec) {
		return fmt.Errorf("hap: AccountClaim %s/%s (uid %s) asks for %s, not %s: %w",
			found.Namespace, found.Name, found.UID, describe(found.Spec), describe(spec), ErrSpecMismatch)
	}
	if got := found.Annotations[AnnotationRequestID]; got != requestID {
		made := "a caller without a request id"
		if got != "" {
			made = fmt.Sprintf("request %q", got)
		}
		return fmt.Errorf("hap: AccountClaim %s/%s (uid %s) asks for the same but was made by %s, not request %q: %w",
			found.Namespace, found.Name, found.UID, made, requestID, ErrClaimedByAnother)
	}
	return nil
}

// ensure creates the claim or adopts the one of that name the same request made.
func (c *Client) ensure(ctx context.Context, name string, spec v1alpha1.AccountClaimSpec, opts Options) (*v1alpha1.AccountClaim, error) {
	want := v1alpha1.NewAccountClaim(c.namespace, name, spec)
	want.Labels, want.Annotations = opts.Labels, withRequestID(opts.Annotations, opts.RequestID)
	for {
		created, err := c.Create(ctx, want)
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			if !retriable(err) {
				return nil, fmt.Errorf("hap: create AccountClaim %s/%s: %w", c.namespace, name, err)
			}
			if err := pause(ctx, opts, err); err != nil {
				return nil, &WaitError{Namespace: c.namespace, Name: name, Err: err}
			}
			continue
		}
		found, err := c.Get(ctx, name)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			if err := pause(ctx, opts, err); err != nil {
				return nil, &WaitError{Namespace: c.namespace, Name: name, Err: err}
			}
			continue
		case found.DeletionTimestamp != nil:
			if err := c.waitGone(ctx, found, opts); err != nil {
				return nil, err
			}
			continue
		}
		if err := adoptable(found, spec, opts.RequestID); err != nil {
			return nil, err
		}
		return found, nil
	}
}

// waitDecision follows the claim (by watch, re-read after every watch error or end) until
// decide says it is done.
func (c *Client) waitDecision(ctx context.Context, claim *v1alpha1.AccountClaim, opts Options) (*Binding, error) {
	var last *ClaimError
	var out *Binding
	err := c.follow(ctx, claim, opts, func(cur *v1alpha1.AccountClaim) (bool, error) {
		if cur.UID != claim.UID {
			return true, fmt.Errorf("hap: AccountClaim %s/%s: uid %s, not %s: %w", c.namespace, claim.Name, cur.UID, claim.UID, ErrClaimReplaced)
		}
		if cur.DeletionTimestamp != nil {
			// Deleted by someone else while waiting: its binding (if any) is being released.
			return true, fmt.Errorf("hap: AccountClaim %s/%s (uid %s) is being deleted: %w", c.namespace, claim.Name, claim.UID, ErrClaimDeleted)
		}
		b, ce, done := decide(cur, opts)
		if ce != nil {
			last = ce
		}
		if !done {
			return false, nil
		}
		out = b
		if ce != nil {
			return true, ce
		}
		return true, nil
	}, func() error {
		return fmt.Errorf("hap: AccountClaim %s/%s (uid %s): %w", c.namespace, claim.Name, claim.UID, ErrClaimDeleted)
	})
	if err != nil && (ctx.Err() != nil && err == ctx.Err()) {
		return nil, &WaitError{Namespace: c.namespace, Name: claim.Name, Err: err, Last: last}
	}
	return out, err
}

// decide reads what the operator recorded: a binding, a refusal, or (done false) nothing final.
func decide(claim *v1alpha1.AccountClaim, opts Options) (*Binding, *ClaimError, bool) {
	s := claim.Status
	if s == nil || s.ObservedGeneration == nil || *s.ObservedGeneration != claim.Generation {
		return nil, nil, false
	}
	if s.Phase != nil && *s.Phase == v1alpha1.AccountClaimStatusPhaseBound && s.CredentialsBindingName != nil {
		b := &Binding{Name: *s.CredentialsBindingName, Claim: claim}
		b.Namespace = deref(s.BindingNamespace)
		b.HyperscalerType = deref(s.HyperscalerType)
		b.EUAccess = s.EuAccess != nil && *s.EuAccess
		b.Shared = s.Shared != nil && *s.Shared
		if s.Decision != nil {
			b.Decision = string(*s.Decision)
		}
		return b, nil, true
	}
	ready := s.Condition("Ready")
	if ready == nil {
		return nil, nil, false
	}
	stalled := s.Condition("Stalled")
	ce := &ClaimError{
		Namespace: claim.Namespace, Name: claim.Name, Condition: "Ready",
		Reason: ready.Reason, Message: ready.Message,
		Final:   s.Phase != nil && *s.Phase == v1alpha1.AccountClaimStatusPhaseFailed,
		Stalled: stalled != nil && stalled.Status == "True",
	}
	switch {
	case ce.Final, ce.Stalled && !opts.WaitWhileStalled:
		return nil, ce, true
	}
	for _, r := range opts.StopOn {
		if r == ce.Reason {
			return nil, ce, true
		}
	}
	return nil, ce, false
}

// follow calls step on the claim and on every later state of it until step is done, the claim
// is gone (gone's error), or ctx ends (ctx.Err()). A watch that fails or ends is resumed from a
// fresh read, so that no change is missed across a broken watch.
func (c *Client) follow(ctx context.Context, claim *v1alpha1.AccountClaim, opts Options,
	step func(*v1alpha1.AccountClaim) (bool, error), gone func() error) error {
	cur := claim
	for {
		if done, err := step(cur); done {
			return err
		}
		events, stop, err := c.Watch(ctx, cur.Name, cur.ResourceVersion)
		if err == nil {
			var done bool
			cur, done, err = c.drain(ctx, events, cur, step, gone)
			stop()
			if done {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if perr := pause(ctx, opts, err); perr != nil {
				return perr
			}
		}
		fresh, gerr := c.Get(ctx, cur.Name)
		switch {
		case apierrors.IsNotFound(gerr):
			return gone()
		case gerr != nil:
			if perr := pause(ctx, opts, gerr); perr != nil {
				return perr
			}
		default:
			cur = fresh
		}
	}
}

// drain applies step to each watch event until the watch ends (done false: re-read and watch
// again) or step is done.
func (c *Client) drain(ctx context.Context, events <-chan Event, cur *v1alpha1.AccountClaim,
	step func(*v1alpha1.AccountClaim) (bool, error), gone func() error) (*v1alpha1.AccountClaim, bool, error) {
	for {
		select {
		case <-ctx.Done():
			return cur, true, ctx.Err()
		case ev, ok := <-events:
			if !ok {
				return cur, false, nil
			}
			switch ev.Type {
			case watch.Error:
				return cur, false, ev.Err
			case watch.Deleted:
				if ev.Claim != nil && ev.Claim.UID == cur.UID {
					return cur, true, gone()
				}
			case watch.Added, watch.Modified:
				if done, err := step(ev.Claim); done {
					return ev.Claim, true, err
				}
				cur = ev.Claim
			}
		}
	}
}

// ReleaseOptions tune Release.
type ReleaseOptions struct {
	// UID deletes only that claim (as Binding.Claim.UID names it); "" deletes whatever claim has
	// the name.
	UID types.UID
	// Wait until the claim is gone: the operator has released its binding (marked it dirty for
	// the cleanup job, by default) and removed its finalizer.
	Wait bool
	// RetryInterval is the pause between attempts after an API error (default 1s).
	RetryInterval time.Duration
}

// Release deletes the claim name; a claim already gone is released. With Wait it returns once
// the claim is gone, or, when ctx ends first, a *WaitError with the last Released=False reason
// if there was one (the release waits for the claim's Shoot to be deleted, which sets no
// condition, for other claims recorded on the binding, for the garden to allow the write, or
// for a valid HapConfig).
func (c *Client) Release(ctx context.Context, name string, opts ReleaseOptions) error {
	claim, err := c.Get(ctx, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("hap: read AccountClaim %s/%s: %w", c.namespace, name, err)
	}
	if opts.UID != "" && claim.UID != opts.UID {
		return nil
	}
	if err := c.Delete(ctx, name, claim.UID); err != nil && !apierrors.IsNotFound(err) {
		if apierrors.IsConflict(err) {
			return nil
		}
		return fmt.Errorf("hap: delete AccountClaim %s/%s: %w", c.namespace, name, err)
	}
	if !opts.Wait {
		return nil
	}
	return c.waitGone(ctx, claim, Options{RetryInterval: opts.RetryInterval})
}

// waitGone waits until the claim (this uid) no longer exists.
func (c *Client) waitGone(ctx context.Context, claim *v1alpha1.AccountClaim, opts Options) error {
	var last *ClaimError
	err := c.follow(ctx, claim, opts, func(cur *v1alpha1.AccountClaim) (bool, error) {
		if cur.UID != claim.UID {
			return true, nil
		}
		if r := cur.Status.Condition("Released"); r != nil && r.Status == "False" {
			last = &ClaimError{Namespace: cur.Namespace, Name: cur.Name, Condition: "Released", Reason: r.Reason, Message: r.Message}
		}
		return false, nil
	}, func() error { return nil })
	if err != nil && ctx.Err() != nil {
		return &WaitError{Namespace: c.namespace, Name: claim.Name, Err: ctx.Err(), Last: last}
	}
	return err
}

// retriable: errors a later attempt may not get (a lost answer, an overloaded or restarting
// API server); an invalid or forbidden claim is not retried.
func retriable(err error) bool {
	return !(apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err))
}

func pause(ctx context.Context, opts Options, _ error) error {
	d := opts.RetryInterval
	if d <= 0 {
		d = time.Second
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func describe(s v1alpha1.AccountClaimSpec) string {
	out := fmt.Sprintf("globalAccount=%s, plan=%s", s.GlobalAccount, s.Plan)
	for _, kv := range []struct {
		k string
		v *string
	}{{"subaccount", s.Subaccount}, {"platformRegion", s.PlatformRegion}, {"clusterRegion", s.ClusterRegion},
		{"provider", s.Provider}, {"shootName", s.ShootName}, {"adoptBinding", s.AdoptBinding}} {
		if kv.v != nil {
			out += fmt.Sprintf(", %s=%s", kv.k, *kv.v)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
