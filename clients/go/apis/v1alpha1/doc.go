// Package v1alpha1 holds the Go types of hap-operator's accountpool.io/v1alpha1 API: HapConfig
// (cluster-scoped: the rules and pools) and AccountClaim (namespaced: one cluster's request for
// a hyperscaler account). The types are generated from crds/accountpool.io.yaml
// (zz_generated.types.go, `make go-types`); a test fails when they drift from it.
package v1alpha1

import "k8s.io/apimachinery/pkg/runtime/schema"

const (
	// Group is the API group of both kinds.
	Group = "accountpool.io"
	// Version is the API version these types describe.
	Version = "v1alpha1"
	// ClaimFinalizer is held by every AccountClaim until the operator has released its binding.
	ClaimFinalizer = "accountpool.io/release"
)

// SchemeGroupVersion is accountpool.io/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// AccountClaims is the resource of AccountClaims, for dynamic and REST clients.
var AccountClaims = SchemeGroupVersion.WithResource(AccountClaimResource)

// HapConfigs is the resource of HapConfigs.
var HapConfigs = SchemeGroupVersion.WithResource(HapConfigResource)
