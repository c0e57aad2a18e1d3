package hap

import (
	"errors"
	"fmt"
)

// Condition reasons the operator writes on an AccountClaim (docs/operating.md §3.2).
const (
	ReasonBound                    = "Bound"
	ReasonDenied                   = "Denied"
	ReasonTenantNotAllowed         = "TenantNotAllowed"
	ReasonBindingLost              = "BindingLost"
	ReasonPoolExhausted            = "PoolExhausted"
	ReasonPaused                   = "Paused"
	ReasonConfigMissing            = "ConfigMissing"
	ReasonProgressing              = "Progressing"
	ReasonInventoryUnavailable     = "InventoryUnavailable"
	ReasonPinnedBindingUnavailable = "PinnedBindingUnavailable"
	ReasonConfigInvalid            = "ConfigInvalid"
	ReasonNoMatchingRule           = "NoMatchingRule"
	ReasonAmbiguousMatch           = "AmbiguousMatch"
	ReasonMissingProvider          = "MissingProvider"
	ReasonUnknownPlan              = "UnknownPlan"
	ReasonBindingNotTenant         = "BindingNotTenant"
	ReasonForbidden                = "Forbidden"
	// Released=False on a claim being deleted: other claims of the tenant are recorded on the
	// binding and may still be bound there.
	ReasonRecordedUseWaiting = "RecordedUseWaiting"
)

// One sentinel per reason: errors.Is(err, ErrPoolExhausted) holds for a *ClaimError of that
// reason, and for a *WaitError whose last seen reason it was.
var (
	ErrDenied                   = errors.New(ReasonDenied)
	ErrTenantNotAllowed         = errors.New(ReasonTenantNotAllowed)
	ErrBindingLost              = errors.New(ReasonBindingLost)
	ErrPoolExhausted            = errors.New(ReasonPoolExhausted)
	ErrPaused                   = errors.New(ReasonPaused)
	ErrConfigMissing            = errors.New(ReasonConfigMissing)
	ErrProgressing              = errors.New(ReasonProgressing)
	ErrInventoryUnavailable     = errors.New(ReasonInventoryUnavailable)
	ErrPinnedBindingUnavailable = errors.New(ReasonPinnedBindingUnavailable)
	ErrConfigInvalid            = errors.New(ReasonConfigInvalid)
	ErrNoMatchingRule           = errors.New(ReasonNoMatchingRule)
	ErrAmbiguousMatch           = errors.New(ReasonAmbiguousMatch)
	ErrMissingProvider          = errors.New(ReasonMissingProvider)
	ErrUnknownPlan              = errors.New(ReasonUnknownPlan)
	ErrBindingNotTenant         = errors.New(ReasonBindingNotTenant)
	ErrForbidden                = errors.New(ReasonForbidden)
	ErrRecordedUseWaiting       = errors.New(ReasonRecordedUseWaiting)

	// ErrSpecMismatch: a claim of that name exists with another spec (claims are immutable:
	// another request must use another name, or release the old claim first).
	ErrSpecMismatch = errors.New("a claim of that name exists with another spec")
	// ErrClaimedByAnother: a claim of that name with the same spec exists, made by another
	// request (its accountpool.io/request-id is not Options.RequestID): it is not the caller's.
	ErrClaimedByAnother = errors.New("a claim of that name was made by another request")
	// ErrClaimDeleted: the claim was deleted while ClaimAndWait waited on it.
	ErrClaimDeleted = errors.New("the claim was deleted while waiting")
	// ErrClaimReplaced: the claim was deleted and another one created under its name while
	// ClaimAndWait waited on the first.
	ErrClaimReplaced = errors.New("the claim was replaced by another of the same name")
)

var sentinels = map[string]error{}

func init() {
	for _, e := range []error{ErrDenied, ErrTenantNotAllowed, ErrBindingLost, ErrPoolExhausted,
		ErrPaused, ErrConfigMissing, ErrProgressing, ErrInventoryUnavailable,
		ErrPinnedBindingUnavailable, ErrConfigInvalid, ErrNoMatchingRule, ErrAmbiguousMatch,
		ErrMissingProvider, ErrUnknownPlan, ErrBindingNotTenant, ErrForbidden, ErrRecordedUseWaiting} {
		sentinels[e.Error()] = e
	}
}

// ClaimError is what the operator decided (or is waiting on) for a claim, as its conditions say.
type ClaimError struct {
	Namespace, Name string
	// Condition is the condition type read: Ready, or Released for a claim being deleted.
	Condition string
	// Reason is the condition's reason (one of the Reason constants, or one this version does
	// not know).
	Reason string
	// Message is the operator's message: for PoolExhausted it names the pool that has no
	// usable binding, for Denied the deny entry and its message.
	Message string
	// Final is true when waiting cannot change the outcome (Failed: Denied, TenantNotAllowed,
	// BindingLost) and Stalled when only a person can (a new HapConfig or a new claim).
	Final, Stalled bool
}

func (e *ClaimError) Error() string {
	return fmt.Sprintf("AccountClaim %s/%s: %s: %s", e.Namespace, e.Name, e.Reason, e.Message)
}

// Is matches the sentinel of the error's reason.
func (e *ClaimError) Is(target error) bool {
	s, ok := sentinels[e.Reason]
	return ok && s == target
}

// WaitError is returned when ctx ends before the operator decided: errors.Is(err,
// context.DeadlineExceeded) (or context.Canceled) holds, and so does errors.Is with the sentinel
// of the last reason seen (Last, nil when the operator had not written a status yet).
type WaitError struct {
	Namespace, Name string
	Err             error
	Last            *ClaimError
}

func (e *WaitError) Error() string {
	if e.Last == nil {
		return fmt.Sprintf("waiting for AccountClaim %s/%s: %v (no decision recorded yet)", e.Namespace, e.Name, e.Err)
	}
	return fmt.Sprintf("waiting for AccountClaim %s/%s: %v; last: %s: %s", e.Namespace, e.Name, e.Err, e.Last.Reason, e.Last.Message)
}

func (e *WaitError) Unwrap() []error {
	if e.Last == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Last}
}
