// The node mode of the launcher (`testenv up --node`): the control plane of `up` plus a real
// node, all inside a network namespace the launcher creates — containerd and runc (Debian's),
// kubelet, kube-scheduler and kube-proxy (built with the control plane), a CNI bridge pod network,
// a pause image built from the kubernetes module's pause.c. The kube-apiserver listens on the
// node IP inside the namespace; a forwarder makes it reachable on the host's loopback at the port
// the kubeconfig names, so tests use the environment like the plain one.
//
// Nothing outside the state directory is changed, and `down` removes what the node made on the
// host (pods and their mounts, cgroups, CNI result files, log symlinks) even after a failure.

package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	nodeName   = "hapnode"
	nodeIP     = "10.250.0.1"
	podSubnet  = "10.244.0.0/24"
	podGateway = "10.244.0.1"
	// The kube-apiserver's --service-cluster-ip-range.
	serviceSubnet = "10.0.0.0/24"
	pauseImage    = "localhost/hap-testenv/pause:3.10.1"
	kubeletPort   = 10250
	// Fixed ports inside the namespace, where nothing else listens.
	kubeletHealthzPort   = 10248
	schedulerPort        = 10259
	proxyHealthzPort     = 10256
	proxyMetricsPort     = 10249
	containerdSocketName = "containerd.sock"
)

// nodeComponents are started after the control plane (and its garden), in this order.
var nodeComponents = []string{"containerd", "kube-scheduler", "kube-proxy", "kubelet"}

// id names what the node creates outside its state directory (cgroups, the CNI network), so two
// environments never share one.
func (e env) id() string {
	sum := sha256.Sum256([]byte(e.dir))
	return hex.EncodeToString(sum[:4])
}

func (e env) containerdSocket() string { return e.path("containerd", containerdSocketName) }
func (e env) cniNetwork() string       { return "hap-" + e.id() }

// joinRecordedNetns makes this environment run in the network namespace of its node when `up
// --node` made one (the options recorded in DIR/run say so). A garden keeps the namespace of the
// environment it belongs to.
func (e *env) joinRecordedNetns() {
	switch {
	case e.recordedOptions().Node:
		e.node, e.netns = true, e.netnsPath()
	case e.node:
		e.node, e.netns = false, ""
	}
}

// netnsComponents are the processes an environment in a namespace adds to components(): the
// forwarder of its kube-apiserver and, with a node, the node's.
func (e env) netnsComponents() []string {
	if e.netns == "" {
		return nil
	}
	c := []string{"forward"}
	if e.node {
		c = append(c, nodeComponents...)
	}
	return c
}

// netnsAPIServerArgs adapts the loopback kube-apiserver's flags to a namespace: listen on every
// address there (pods reach a garden's at the node IP). A node's also advertises the node IP (so
// the `kubernetes` Service has an endpoint pods reach through kube-proxy), keeps that endpoint
// with the lease reconciler, turns on the ServiceAccount and NodeRestriction admission plugins
// and the Node authorizer, and gets client certificates for calling the kubelet (logs, exec).
func (e env) netnsAPIServerArgs(args []string) ([]string, error) {
	if e.netns == "" {
		return args, nil
	}
	replace := map[string]string{"--bind-address=127.0.0.1": "--bind-address=0.0.0.0"}
	if e.node {
		replace["--advertise-address=127.0.0.1"] = "--advertise-address=" + nodeIP
		replace["--endpoint-reconciler-type=none"] = "--endpoint-reconciler-type=lease"
		replace["--disable-admission-plugins=ServiceAccount"] = "--enable-admission-plugins=NodeRestriction"
		replace["--authorization-mode=RBAC"] = "--authorization-mode=Node,RBAC"
	}
	out := make([]string, 0, len(args)+4)
	for _, a := range args {
		if r, ok := replace[a]; ok {
			out = append(out, r)
			delete(replace, a)
			continue
		}
		out = append(out, a)
	}
	if len(replace) > 0 {
		var missing []string
		for k := range replace {
			missing = append(missing, k)
		}
		return nil, fmt.Errorf("node mode: kube-apiserver flags changed, cannot adapt %v (update netnsAPIServerArgs)", missing)
	}
	if !e.node {
		return out, nil
	}
	pki := func(f string) string { return e.path("pki", f) }
	return append(out,
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority="+pki("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
	), nil
}

// nodeControllers are the kube-controller-manager controllers pods need, on top of the plain
// environment's.
const nodeControllers = "deployment-controller,replicaset-controller,disruption-controller," +
	"endpointslice-controller,node-lifecycle-controller,pod-garbage-collector-controller," +
	"taint-eviction-controller"

// nodeKCMArgs adds nodeControllers to the --controllers flag of a node's control plane.
func (e env) nodeKCMArgs(args ...string) []string {
	if !e.node {
		return args
	}
	out := append([]string{}, args...)
	for i, a := range out {
		if strings.HasPrefix(a, "--controllers=") {
			out[i] = a + "," + nodeControllers
		}
	}
	return out
}

// prepareNode runs before etcd starts: the namespace, the node's certificates and files.
func (e env) prepareNode() error {
	if os.Geteuid() != 0 {
		return errors.New("node mode needs root: it creates a network namespace, mounts and cgroups, and runs containerd and the kubelet")
	}
	for _, tool := range []string{"nsenter", "unshare", "mount", "ip", "sysctl", "ctr", "runc", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("node mode: %s is missing (scripts/ensure-node-tools.sh node installs what the node needs)", tool)
		}
	}
	if err := e.createNetns(); err != nil {
		return err
	}
	return e.writeNodePKI()
}

// nodeUp starts containerd, imports the pause image and e.images, then kube-scheduler,
// kube-proxy and kubelet, and waits until the node is Ready.
func (e env) nodeUp() error {
	start := time.Now()
	// The same port number inside the namespace and, through the forwarder, on the host.
	apiPort, err := strconv.Atoi(e.readRun("apiserver-port"))
	if err != nil {
		return fmt.Errorf("node: no recorded kube-apiserver port: %w", err)
	}
	images := e.images
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "images"} {
		if err := os.MkdirAll(e.path(d), 0o700); err != nil {
			return err
		}
	}
	if len(e.containerdSocket()) > 100 {
		return fmt.Errorf("state directory too deep: the containerd socket path %s exceeds the 108-byte limit of unix sockets; use a shorter --dir", e.containerdSocket())
	}
	if err := e.recordHostState(); err != nil {
		return err
	}
	if err := e.writeNodeFiles(apiPort); err != nil {
		return err
	}
	if err := e.start("containerd", "--config="+e.path("containerd", "config.toml"), "--log-level=warn"); err != nil {
		return err
	}
	if err := e.waitFor("containerd", func() error {
		_, err := e.ctr("version")
		return err
	}); err != nil {
		return err
	}
	pause, err := e.writePauseArchive()
	if err != nil {
		return err
	}
	for _, archive := range append([]string{pause}, images...) {
		if err := e.importImage(archive); err != nil {
			return err
		}
	}
	if err := e.startKubelet(); err != nil {
		return err
	}
	if err := e.start("kube-scheduler",
		"--kubeconfig="+e.kubeconfig(),
		"--authentication-kubeconfig="+e.kubeconfig(),
		"--authorization-kubeconfig="+e.kubeconfig(),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", schedulerPort),
		"--v=1",
	); err != nil {
		return err
	}
	if err := e.start("kube-proxy", "--config="+e.path("run", "kube-proxy.yaml"), "--v=1"); err != nil {
		return err
	}
	insecure := e.inNode(insecureClient())
	for _, w := range []struct{ name, url string }{
		{"kubelet", fmt.Sprintf("http://127.0.0.1:%d/healthz", kubeletHealthzPort)},
		{"kube-scheduler", fmt.Sprintf("https://127.0.0.1:%d/healthz", schedulerPort)},
		// /healthz also wants the Node object; /livez is the proxier's own sync.
		{"kube-proxy", fmt.Sprintf("http://127.0.0.1:%d/livez", proxyHealthzPort)},
	} {
		if err := e.waitFor(w.name, func() error { return httpOK(insecure, w.url) }); err != nil {
			return err
		}
	}
	if err := e.waitFor("kubelet", e.nodeReady); err != nil {
		return err
	}
	took := time.Since(start).Round(100 * time.Millisecond)
	_ = os.WriteFile(e.path("run", "node-start"), []byte(took.String()+"\n"), 0o600)
	fmt.Fprintf(os.Stderr, "testenv: node %s Ready %s after the control plane (containerd, %d image(s) imported, kube-scheduler, kube-proxy, kubelet)\n", nodeName, took, len(images)+1)
	return nil
}

func insecureClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: insecureTransport()}
}

// nodeReady checks the Node object's Ready condition with the admin token.
func (e env) nodeReady() error {
	api, err := e.admin()
	if err != nil {
		return err
	}
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status, Reason, Message string }
		}
	}
	if err := api.getJSON("/api/v1/nodes/"+nodeName, &node); err != nil {
		return err
	}
	for _, c := range node.Status.Conditions {
		if c.Type == "Ready" {
			if c.Status == "True" {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s: %s", nodeName, c.Reason, c.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", nodeName)
}

// ctr runs Debian's ctr against this environment's containerd, in the k8s.io namespace the CRI
// plugin uses.
func (e env) ctr(args ...string) ([]byte, error) {
	cmd := exec.Command("ctr", append([]string{"--address", e.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// importImage loads an OCI archive into containerd (unpacked for the overlayfs snapshotter), so
// the kubelet finds it with imagePullPolicy IfNotPresent and never pulls.
func (e env) importImage(archive string) error {
	if _, err := os.Stat(archive); err != nil {
		return fmt.Errorf("image archive: %w", err)
	}
	_, err := e.ctr("images", "import", "--no-unpack=false", archive)
	return err
}

// loadImage is the `load-image` verb: import more archives into a running node.
func (e env) loadImage(archives []string) error {
	if _, ok := e.pid("containerd"); !ok {
		return errors.New("containerd of this environment is not running (testenv up --node first)")
	}
	for _, a := range archives {
		if err := e.importImage(a); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "testenv: imported %s\n", a)
	}
	return nil
}

// startKubelet starts the kubelet in a mount namespace of its own, where the six kernel settings
// it insists on read as it wants them (bind mounts over /proc/sys files, private to that
// namespace), and /var/lib and /var/log are writable overlays kept in the state directory. With protectKernelDefaults it would refuse to start on this host's values, without
// it it would write them — host-wide settings such as kernel.panic_on_oops — so neither is
// acceptable. Its root directory is a shared mount, so the volumes it mounts for pods propagate
// to the host's mount namespace, where containerd and runc mount them into containers.
func (e env) startKubelet() error {
	root := e.path("kubelet")
	if out, err := exec.Command("mount", "--bind", root, root).CombinedOutput(); err != nil {
		return fmt.Errorf("bind-mounting the kubelet root %s: %v: %s", root, err, out)
	}
	if out, err := exec.Command("mount", "--make-shared", root).CombinedOutput(); err != nil {
		return fmt.Errorf("making %s a shared mount: %v: %s", root, err, out)
	}
	wanted := [][2]string{
		{"vm/overcommit_memory", "1"},
		{"vm/panic_on_oom", "0"},
		{"kernel/panic", "10"},
		{"kernel/panic_on_oops", "1"},
		{"kernel/keys/root_maxkeys", "1000000"},
		{"kernel/keys/root_maxbytes", "25000000"},
	}
	dir := e.path("run", "sysctl")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// /var/lib and /var/log are overlays in that namespace, with the upper layers in the state
	// directory: the kubelet writes a few fixed host paths whatever its flags say (its device
	// plugin socket in /var/lib/kubelet/device-plugins, log symlinks in /var/log/containers).
	script := "#!/bin/sh\n# Written by testenv: the kubelet's mount namespace (see startKubelet).\nset -e\n" +
		"# Nothing mounted here propagates to the host; the kubelet's root stays shared.\n" +
		"mount --make-private /\nmount --make-rprivate /proc\n"
	for _, d := range []string{"/var/lib", "/var/log"} {
		if e.dir == d || strings.HasPrefix(e.dir, d+"/") {
			return fmt.Errorf("node mode: the state directory %s must not be under %s (the kubelet sees an overlay there)", e.dir, d)
		}
		layer := e.path("kubelet-host", strings.ReplaceAll(strings.Trim(d, "/"), "/", "-"))
		for _, sub := range []string{"upper", "work"} {
			if err := os.MkdirAll(filepath.Join(layer, sub), 0o700); err != nil {
				return err
			}
		}
		script += fmt.Sprintf("mount -t overlay overlay -o lowerdir=%[1]s,upperdir=%[2]s/upper,workdir=%[2]s/work %[1]s\n", d, layer)
	}
	for _, w := range wanted {
		f := filepath.Join(dir, strings.ReplaceAll(w[0], "/", "."))
		if err := os.WriteFile(f, []byte(w[1]+"\n"), 0o444); err != nil {
			return err
		}
		script += fmt.Sprintf("mount --bind -o ro %s /proc/sys/%s\n", f, w[0])
	}
	script += "exec \"$@\"\n"
	wrapper := e.path("run", "kubelet.sh")
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		return err
	}
	// command() runs it through the wrapper.
	return e.start("kubelet",
		"--config="+e.path("run", "kubelet.yaml"),
		"--kubeconfig="+e.path("run", "kubelet.kubeconfig"),
		"--root-dir="+root,
		"--cert-dir="+e.path("kubelet", "pki"),
		"--hostname-override="+nodeName,
		"--node-ip="+nodeIP,
		"--v=1",
	)
}

// writeNodeFiles writes the configuration of containerd, CNI, kube-proxy and the kubelet.
func (e env) writeNodeFiles(apiPort int) error {
	pki := func(f string) string { return e.path("pki", f) }
	files := map[string]string{}
	files[e.path("containerd", "config.toml")] = fmt.Sprintf(`# Written by testenv (node mode). Everything under the state directory; plugins that would
# write elsewhere on the host are disabled.
version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # No CAP_SYS_RESOURCE here: never lower an OOM score below containerd's own.
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[5]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
    max_conf_num = 1
`, e.path("containerd", "root"), e.path("containerd", "state"), e.containerdSocket(), pauseImage,
		e.path("containerd", "runc"), e.path("cni", "net.d"))

	cni := map[string]any{
		"cniVersion": "0.4.0",
		"name":       e.cniNetwork(),
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      "cni0",
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": podSubnet, "gateway": podGateway}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": e.path("cni", "ipam"),
			},
		}},
	}
	raw, err := json.MarshalIndent(cni, "", "  ")
	if err != nil {
		return err
	}
	files[e.path("cni", "net.d", "10-hap.conflist")] = string(raw)

	server := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	files[e.path("run", "kubelet.kubeconfig")] = fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster: {server: %q, certificate-authority: %q}
users:
- name: node
  user: {client-certificate: %q, client-key: %q}
contexts:
- name: node
  context: {cluster: testenv, user: node}
current-context: node
`, server, pki("ca.crt"), pki("node.crt"), pki("node.key"))

	files[e.path("run", "kubelet.yaml")] = fmt.Sprintf(`# Written by testenv (node mode).
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]q
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[3]d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[4]q}
authorization: {mode: Webhook}
tlsCertFile: %[5]q
tlsPrivateKeyFile: %[6]q
# This host kind has hybrid cgroup v1 and no systemd.
cgroupDriver: cgroupfs
cgroupRoot: %[7]q
failCgroupV1: false
failSwapOn: false
# Read through the mount namespace startKubelet sets up: never written.
protectKernelDefaults: true
containerRuntimeEndpoint: %[8]q
podLogsDir: %[9]q
volumePluginDir: %[10]q
# Imported images cannot be pulled again: never collect them.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%%", nodefs.inodesFree: "1%%", imagefs.available: "1%%"}
resolvConf: ""
maxPods: 30
serializeImagePulls: false
shutdownGracePeriod: 0s
`, nodeIP, kubeletPort, kubeletHealthzPort, pki("ca.crt"), pki("kubelet.crt"), pki("kubelet.key"),
		e.cgroupRoot(), "unix://"+e.containerdSocket(), e.path("pod-logs"), e.path("kubelet", "volume-plugins"))

	files[e.path("run", "kube-proxy.yaml")] = fmt.Sprintf(`# Written by testenv (node mode). iptables rules live in the node's namespace only; conntrack
# settings (host-wide) are left alone.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %[1]q}
mode: iptables
clusterCIDR: %[2]q
hostnameOverride: %[3]q
bindAddress: %[4]q
healthzBindAddress: "127.0.0.1:%[5]d"
metricsBindAddress: "127.0.0.1:%[6]d"
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
`, e.kubeconfig(), podSubnet, nodeName, nodeIP, proxyHealthzPort, proxyMetricsPort)

	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	return e.createCgroups()
}

// binary is the executable of a component: the launcher itself for the forwarder, Debian's
// containerd, else the control-plane build.
func (e env) binary(name string) (string, error) {
	switch name {
	case "forward":
		return os.Executable()
	case "containerd":
		p, err := exec.LookPath("containerd")
		if err != nil {
			return "", fmt.Errorf("containerd is not installed (scripts/ensure-node-tools.sh node installs it): %w", err)
		}
		return p, nil
	}
	p := filepath.Join(e.bin, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s: binary not found at %s (run e2e/build-control-plane.sh)", name, p)
	}
	return p, nil
}

// command is how a component is executed: as is on the host, or in a node environment inside
// its network namespace (the kubelet through the wrapper of startKubelet).
func (e env) command(name, binary string, args ...string) *exec.Cmd {
	if e.netns == "" || name == "forward" {
		return exec.Command(binary, args...)
	}
	argv := append([]string{binary}, args...)
	if name == "kubelet" {
		argv = append([]string{"unshare", "--mount", "--propagation", "unchanged", "--", "/bin/sh", e.path("run", "kubelet.sh")}, argv...)
	}
	if name == "gardener-apiserver" {
		argv = append([]string{"unshare", "--mount", "--", "/bin/sh", "-c", gardenerHostsScript, "gardener-apiserver", e.hostsFile()}, argv...)
	}
	return e.inNetns(argv...)
}

// gardenerHostsScript runs gardener-apiserver with hostsFile bind-mounted over /etc/hosts, in a
// mount namespace of its own (nothing propagates to the host). Unlike kube-apiserver, which
// calls a webhook Service at its cluster IP, gardener-apiserver dials the Service's DNS name
// (<service>.<namespace>.svc), as every generic API server does; in a landscape cluster DNS
// answers it, here nothing does. Tests write `<cluster IP> <service>.<namespace>.svc` lines into
// hostsFile (in place: the bind mount holds its inode); Go's resolver reads it again when it
// changes.
const gardenerHostsScript = `set -e
mount --make-rprivate /
mount --bind "$1" /etc/hosts
shift
exec "$@"`

// hostsFile is the /etc/hosts gardener-apiserver sees in a node environment (see
// gardenerHostsScript), created as a copy of the host's.
func (e env) hostsFile() string {
	return e.path("run", "hosts")
}

// writeHostsFile creates hostsFile from the host's /etc/hosts, once.
func (e env) writeHostsFile() error {
	if _, err := os.Stat(e.hostsFile()); err == nil {
		return nil
	}
	host, err := os.ReadFile("/etc/hosts")
	if err != nil {
		return err
	}
	head := "# Written by testenv: the /etc/hosts of gardener-apiserver in the node environment.\n" +
		"# Tests add `<cluster IP> <service>.<namespace>.svc` lines, as cluster DNS would answer.\n"
	return os.WriteFile(e.hostsFile(), append([]byte(head), host...), 0o644)
}

// startForward starts the forwarder: the host's 127.0.0.1:port to the same port inside the
// namespace, where kube-apiserver listens on every address.
func (e env) startForward(port int) error {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return e.start("forward", "forward", "--listen="+addr, "--target="+addr, "--netns="+e.netns, "--dir="+e.dir)
}

// httpGet is the `http-get` verb: GET a URL from inside the node's namespace (pod and Service
// IPs are reachable only there) and print the body; fails on a status other than 200.
func (e env) httpGet(url string) error {
	if e.netns == "" {
		return errors.New("http-get needs a node environment (testenv up --node)")
	}
	c := e.inNode(&http.Client{Timeout: 10 * time.Second})
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
