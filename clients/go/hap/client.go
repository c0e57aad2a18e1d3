// Package hap is the Go client of hap-operator's AccountClaim API for provisioners: a typed
// client (Create, Get, Delete, Watch), ClaimAndWait, which creates a claim (or finds the one a
// retry already created) and waits for the operator's decision, and Release.
package hap

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/hap-operator/hap-operator/clients/go/apis/v1alpha1"
)

// Client reads and writes the AccountClaims of one namespace (the operator's claim namespace,
// or the provisioner's own when the operator watches every namespace).
type Client struct {
	res       dynamic.ResourceInterface
	namespace string
}

// New returns a client for the AccountClaims of namespace.
func New(cfg *rest.Config, namespace string) (*Client, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hap: dynamic client: %w", err)
	}
	return NewForDynamic(dyn, namespace), nil
}

// NewForDynamic returns a client on an existing dynamic client.
func NewForDynamic(dyn dynamic.Interface, namespace string) *Client {
	return &Client{res: dyn.Resource(v1alpha1.AccountClaims).Namespace(namespace), namespace: namespace}
}

// Namespace is the namespace of the claims this client handles.
func (c *Client) Namespace() string { return c.namespace }

// Create creates claim (its namespace is the client's).
func (c *Client) Create(ctx context.Context, claim *v1alpha1.AccountClaim) (*v1alpha1.AccountClaim, error) {
	claim = claim.ForCreate(c.namespace)
	u, err := toUnstructured(claim)
	if err != nil {
		return nil, err
	}
	out, err := c.res.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return fromUnstructured(out)
}

// Get reads the claim name.
func (c *Client) Get(ctx context.Context, name string) (*v1alpha1.AccountClaim, error) {
	out, err := c.res.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return fromUnstructured(out)
}

// Delete deletes the claim name; with a uid, only that object (a claim re-created under the same
// name is left alone). The operator releases the binding, then removes its finalizer.
func (c *Client) Delete(ctx context.Context, name string, uid types.UID) error {
	opts := metav1.DeleteOptions{}
	if uid != "" {
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	return c.res.Delete(ctx, name, opts)
}

// Event is one change of a watched claim. Claim is nil for watch.Error events, whose Err says why.
type Event struct {
	Type  watch.EventType
	Claim *v1alpha1.AccountClaim
	Err   error
}

// Watch watches the claim name from resourceVersion ("" for the current state first). The
// channel closes when the server ends the watch or ctx ends; call stop to end it early.
func (c *Client) Watch(ctx context.Context, name, resourceVersion string) (events <-chan Event, stop func(), err error) {
	w, err := c.res.Watch(ctx, metav1.ListOptions{
		FieldSelector:       fields.OneTermEqualSelector("metadata.name", name).String(),
		ResourceVersion:     resourceVersion,
		AllowWatchBookmarks: false,
	})
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan Event)
	// stopped ends the forwarding when the caller stops reading: without it the goroutine would
	// block on a send nobody receives for as long as ctx lives.
	stopped := make(chan struct{})
	var once sync.Once
	stop = func() {
		once.Do(func() { close(stopped) })
		w.Stop()
	}
	go func() {
		defer close(ch)
		for ev := range w.ResultChan() {
			out := Event{Type: ev.Type}
			switch o := ev.Object.(type) {
			case *unstructured.Unstructured:
				out.Claim, out.Err = fromUnstructured(o)
			case *metav1.Status:
				out.Err = apierrors.FromObject(o)
			default:
				out.Err = fmt.Errorf("hap: watch sent %T", ev.Object)
			}
			if out.Err != nil {
				out.Type = watch.Error
			}
			select {
			case ch <- out:
			case <-stopped:
				return
			case <-ctx.Done():
				w.Stop()
				return
			}
		}
	}()
	return ch, stop, nil
}

func toUnstructured(claim *v1alpha1.AccountClaim) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(claim)
	if err != nil {
		return nil, fmt.Errorf("hap: encode claim %s: %w", claim.Name, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func fromUnstructured(u *unstructured.Unstructured) (*v1alpha1.AccountClaim, error) {
	var claim v1alpha1.AccountClaim
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &claim); err != nil {
		return nil, fmt.Errorf("hap: decode claim %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &claim, nil
}
