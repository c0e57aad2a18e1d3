package main

import (
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kstatus is what Flux's kustomize-controller decides for `wait`/`healthChecks`: the library's
// own status.Compute, nothing re-implemented.
func kstatus(obj map[string]interface{}) (result, error) {
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return result{}, err
	}
	return result{Status: res.Status.String(), Message: res.Message}, nil
}
