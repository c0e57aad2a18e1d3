// Command testenv runs real Kubernetes control planes on loopback for hap-operator's tests:
// etcd, kube-apiserver (RBAC, token auth, service-account keys, the aggregation layer, an audit
// log), kube-controller-manager and, registered as an aggregated API server, the real
// gardener-apiserver with the objects a Gardener landscape has before any binding exists.
//
//	testenv up [--garden] [--gardener=BOOL]
//	                start it (idempotent) and print the export lines. --gardener (default on)
//	                serves the Gardener API in this control plane; --garden also starts a
//	                separate garden (a second control plane with gardener-apiserver, state in
//	                DIR/garden) and then the first serves no Gardener API unless --gardener is
//	                given explicitly
//	testenv down    stop exactly the processes it started (the garden's too) and remove its data
//	testenv env     print the export lines
//	testenv status  exit 0 when every component is running and ready
//	testenv restart-apiserver [--down-for D] [--grace D]
//	                stop only kube-apiserver (TERM, KILL after --grace), keep it down for D, start it
//	                again with the flags, ports and certificates recorded by `up`, and wait for
//	                /readyz (fault injection for chaos tests)
//	testenv restart-gardener-apiserver [--down-for D] [--grace D] [--disable-admission PLUGINS]
//	                the same for gardener-apiserver; waits until its APIServices are Available.
//	                --disable-admission starts it this once with those admission plugins off
//	                (bulk setup for benchmarks); a later restart without it restores the flags
//	                recorded by `up`
//	testenv up --node [--images A.oci.tar,...]
//	                the same control plane (and garden) plus a real node, all in a network namespace
//	                the launcher creates (node.go): containerd, kubelet, kube-scheduler, kube-proxy,
//	                a CNI bridge; the archives are imported into containerd
//	testenv load-image A.oci.tar...   import more images into a running node
//	testenv http-get URL              GET from inside the node's namespace (pod and Service IPs)
//
// State lives in --dir (default .testenv in the working directory): pid files, logs (the audit
// log among them), certificates, the kubeconfig and etcd's data. Each concern has a file:
// proc.go (processes), pki.go (certificates), controlplane.go (etcd, kube-apiserver,
// kube-controller-manager), audit.go, gardener.go (gardener-apiserver and its APIServices),
// landscape.go (CloudProfiles, ControllerRegistrations, Projects), garden.go (the separate
// garden), rest.go (the admin's HTTP client).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type env struct {
	dir         string // state directory
	bin         string // directory holding the control-plane binaries
	gardenerBin string // the gardener-apiserver binary
	timeout     time.Duration
	node        bool     // this control plane has a node (node.go)
	netns       string   // the network namespace its processes run in; "" = the host's
	images      []string // up --node: OCI archives to import
}

// options is what `up` was asked for; recorded so that a second `up` with other options
// starts afresh instead of keeping a control plane of the wrong shape.
type options struct {
	Gardener bool `json:"gardener"` // gardener-apiserver in this control plane
	Garden   bool `json:"garden"`   // a separate garden in DIR/garden
	Node     bool `json:"node"`     // a node, and everything in a network namespace (node.go)
}

func main() {
	fs := flag.NewFlagSet("testenv", flag.ExitOnError)
	dir := fs.String("dir", ".testenv", "state directory (pid files, logs, certificates, kubeconfig, etcd data)")
	bin := fs.String("bin", os.Getenv("HAP_K8S_BIN"), "directory with kube-apiserver, kube-controller-manager, kubectl and etcd")
	gardenerBin := fs.String("gardener-bin", os.Getenv("HAP_GARDENER_APISERVER"), "the gardener-apiserver binary")
	gardener := fs.Bool("gardener", true, "up: serve the Gardener API (gardener-apiserver) in this control plane")
	garden := fs.Bool("garden", false, "up: also start a separate garden control plane in DIR/garden")
	timeout := fs.Duration("timeout", 90*time.Second, "how long `up` waits for each component")
	downFor := fs.Duration("down-for", 0, "restart-*: how long the server stays stopped")
	grace := fs.Duration("grace", 3*time.Second, "restart-*: how long the server may drain after TERM before KILL")
	node := fs.Bool("node", false, "up: add a node (kubelet, containerd, ...) and run everything in a network namespace")
	images := fs.String("images", "", "up --node: comma-separated OCI archives to import into containerd")
	listen := fs.String("listen", "", "forward (internal): host address to listen on")
	netns := fs.String("netns", "", "forward (internal): the network namespace to connect in")
	target := fs.String("target", "", "forward (internal): address inside the node's namespace")
	disableAdmission := fs.String("disable-admission", "", "restart-gardener-apiserver: admission plugins (comma-separated) off for this start only")
	if len(os.Args) < 2 {
		usage()
	}
	verb := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	gardenerSet := false
	fs.Visit(func(f *flag.Flag) { gardenerSet = gardenerSet || f.Name == "gardener" })
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fail("cannot resolve --dir %q: %v", *dir, err)
	}
	e := env{dir: abs, bin: *bin, gardenerBin: *gardenerBin, timeout: *timeout}
	e.joinRecordedNetns()
	switch verb {
	case "up":
		opts := options{Gardener: *gardener, Garden: *garden, Node: *node}
		if *images != "" {
			e.images = strings.Split(*images, ",")
		}
		if *garden && !gardenerSet {
			// A real landscape: the operator's cluster serves no Gardener API.
			opts.Gardener = false
		}
		if e.bin == "" {
			fail("no binaries: pass --bin or set HAP_K8S_BIN (e2e/testenv does this for you)")
		}
		if (opts.Gardener || opts.Garden) && e.gardenerBin == "" {
			fail("no gardener-apiserver: pass --gardener-bin or set HAP_GARDENER_APISERVER (e2e/testenv does this for you)")
		}
		start := time.Now()
		started, err := e.up(opts)
		if err != nil {
			fail("%v", err)
		}
		if started {
			e.joinRecordedNetns()
			what := strings.Join(e.components(), ", ")
			if opts.Garden {
				what += "; garden: " + strings.Join(e.garden().components(), ", ")
			}
			fmt.Fprintf(os.Stderr, "testenv: up in %.1fs (%s)\n", time.Since(start).Seconds(), what)
		}
		e.printEnv()
	case "down":
		if err := e.down(); err != nil {
			fail("%v", err)
		}
	case "env":
		e.printEnv()
	case "forward":
		if err := forward(*listen, *netns, *target); err != nil {
			fail("forward: %v", err)
		}
	case "load-image":
		if err := e.loadImage(fs.Args()); err != nil {
			fail("%v", err)
		}
	case "http-get":
		if fs.NArg() != 1 {
			fail("usage: testenv http-get --dir DIR URL")
		}
		if err := e.httpGet(fs.Arg(0)); err != nil {
			fail("%v", err)
		}
	case "restart-apiserver":
		e.recordedBinaries()
		if err := e.restartAPIServer(*downFor, *grace); err != nil {
			fail("%v", err)
		}
		fmt.Println("testenv: kube-apiserver restarted; /readyz is ok")
	case "restart-gardener-apiserver":
		e.recordedBinaries()
		if err := e.restartGardener(*downFor, *grace, *disableAdmission); err != nil {
			fail("%v", err)
		}
		fmt.Println("testenv: gardener-apiserver restarted; its APIServices are Available")
	case "status":
		if err := e.status(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: not healthy: %v\n", err)
			os.Exit(1)
		}
		what := strings.Join(e.components(), ", ")
		if e.recordedOptions().Garden {
			what += "; garden: " + strings.Join(e.garden().components(), ", ")
		}
		fmt.Printf("testenv: %s are running; /readyz is ok\n", what)
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testenv up|down|env|status|restart-apiserver|restart-gardener-apiserver [--dir DIR] [--bin DIR] [--gardener-bin FILE] [--garden] [--gardener=BOOL] [--node] [--images A,B] [--timeout D] [--down-for D] [--grace D] [--disable-admission PLUGINS]")
	os.Exit(2)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "testenv: "+format+"\n", args...)
	os.Exit(1)
}

func (e env) path(parts ...string) string { return filepath.Join(append([]string{e.dir}, parts...)...) }
func (e env) kubeconfig() string          { return e.path("kubeconfig") }

func (e env) printEnv() {
	fmt.Printf("export KUBECONFIG=%s\n", e.kubeconfig())
	if g := e.garden(); g.exists() {
		fmt.Printf("export HAP_GARDEN_KUBECONFIG=%s\n", g.kubeconfig())
	}
}

// recordedBinaries fills in the binaries `up` used when the caller names none.
func (e *env) recordedBinaries() {
	if e.bin == "" {
		e.bin = e.readRun("bin")
	}
	if e.gardenerBin == "" {
		e.gardenerBin = e.readRun("gardener-bin")
	}
	if e.bin == "" {
		fail("no binaries: pass --bin or set HAP_K8S_BIN (e2e/testenv does this for you)")
	}
}

// readRun is the trimmed content of a file in DIR/run, or "" when there is none.
func (e env) readRun(name string) string {
	raw, err := os.ReadFile(e.path("run", name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

func (e env) writeRun(name, content string) error {
	return os.WriteFile(e.path("run", name), []byte(content), 0o600)
}

func (e env) recordedOptions() options {
	var o options
	_ = json.Unmarshal([]byte(e.readRun("options.json")), &o)
	return o
}

func (e env) writeOptions(o options) error {
	raw, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return e.writeRun("options.json", string(raw))
}

// up starts whatever is not running and reports whether it started anything. A healthy control
// plane of the requested shape is left alone; a partial one (a component died), one of another
// shape, or one an older launcher started without the webhook client certificate is torn down
// and started afresh, since its data is disposable.
func (e env) up(opts options) (bool, error) {
	if e.readRun("complete") == "yes" && e.recordedOptions() == opts && e.status() == nil && e.presentsWebhookClientCert(opts) {
		return false, nil
	}
	if err := e.down(); err != nil {
		return false, err
	}
	for _, dir := range []string{e.dir, e.path("pki"), e.path("logs"), e.path("run")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, err
		}
	}
	if err := e.writeOptions(opts); err != nil {
		return false, err
	}
	e.joinRecordedNetns()
	if err := e.writeRun("bin", e.bin); err != nil {
		return false, err
	}
	if err := e.writePKI(); err != nil {
		return false, fmt.Errorf("writing certificates: %w", err)
	}
	if err := e.writeAuditPolicy(); err != nil {
		return false, err
	}
	if e.node {
		if err := e.prepareNode(); err != nil {
			return false, err
		}
	}
	// The garden comes up beside this control plane: most of a start is waiting. Its result is
	// awaited whatever happens here, so no process of it is left half-recorded.
	garden := make(chan error, 1)
	if opts.Garden {
		go func() { garden <- e.upGarden() }()
	} else {
		garden <- nil
	}
	err := e.upOwn(opts)
	if gerr := <-garden; err == nil && gerr != nil {
		err = fmt.Errorf("garden: %w", gerr)
	}
	if err != nil {
		return false, err
	}
	if e.node {
		if err := e.nodeUp(); err != nil {
			return false, err
		}
	}
	// Only a complete `up` is kept by the next one; a failed one is started afresh.
	return true, e.writeRun("complete", "yes")
}

// upOwn starts this control plane's own components (not the garden's).
func (e env) upOwn(opts options) error {
	free, err := freePorts(5)
	if err != nil {
		return err
	}
	p := portSet{etcdClient: free[0], etcdPeer: free[1], api: free[2], kcm: free[3], gardener: free[4]}
	if err := e.startControlPlane(p); err != nil {
		return err
	}
	if opts.Gardener {
		if err := e.writeRun("gardener-bin", e.gardenerBin); err != nil {
			return err
		}
		if err := e.startGardener(p); err != nil {
			return err
		}
		if err := e.bootstrapLandscape(); err != nil {
			return fmt.Errorf("creating the landscape's objects: %w", err)
		}
	}
	return nil
}

// components are the processes of this control plane (not the garden's), in start order.
func (e env) components() []string {
	c := []string{"etcd", "kube-apiserver", "kube-controller-manager"}
	if e.recordedOptions().Gardener {
		c = append(c, "gardener-apiserver")
	}
	return append(c, e.netnsComponents()...)
}

// down stops the garden first, then the recorded processes in reverse start order (TERM, then
// KILL after 10s), and removes the state directory. Processes it did not start are never
// signalled.
func (e env) down() error {
	// What was started, not what this call was asked for (`up` tears down another shape).
	e.joinRecordedNetns()
	var errs []error
	if e.node {
		errs = e.nodeDown()
	}
	if g := e.garden(); g.exists() {
		if err := g.down(); err != nil {
			errs = append(errs, err)
		}
	}
	c := e.components()
	for i := len(c) - 1; i >= 0; i-- {
		if pid, ok := e.pid(c[i]); ok {
			stop(pid, 10*time.Second)
		}
	}
	if e.node {
		if err := e.nodeCleanup(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(e.dir); err != nil {
		errs = append(errs, fmt.Errorf("removing %s: %w", e.dir, err))
	}
	return errors.Join(errs...)
}

func (e env) status() error {
	for _, c := range e.components() {
		if _, ok := e.pid(c); !ok {
			return fmt.Errorf("%s is not running", c)
		}
	}
	api, err := e.admin()
	if err != nil {
		return err
	}
	if err := api.ok("/readyz"); err != nil {
		return err
	}
	if e.recordedOptions().Gardener {
		if err := api.apiServicesAvailable(); err != nil {
			return err
		}
	}
	if e.node {
		if err := e.nodeReady(); err != nil {
			return err
		}
	}
	if e.recordedOptions().Garden {
		if err := e.garden().status(); err != nil {
			return fmt.Errorf("garden: %w", err)
		}
	}
	return nil
}
