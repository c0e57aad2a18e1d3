// Command testenv runs a real Kubernetes control plane on loopback for hap-operator's tests:
// etcd, kube-apiserver (RBAC, token auth, service-account keys) and kube-controller-manager
// (namespace, garbage-collector and service-account controllers).
//
//	testenv up      start it (idempotent) and print `export KUBECONFIG=...`
//	testenv down    stop exactly the processes it started and remove its data
//	testenv env     print the export line
//	testenv status  exit 0 when every component is running and the apiserver is ready
//	testenv restart-apiserver [--down-for D] [--grace D]
//	                stop only kube-apiserver (TERM, KILL after --grace), keep it down for D, start it
//	                again with the flags, ports and certificates recorded by `up`, and wait
//	                for /readyz (fault injection for chaos tests)
//
// State lives in --dir (default .testenv in the working directory): pid files, logs,
// certificates, the kubeconfig and etcd's data.
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var components = []string{"etcd", "kube-apiserver", "kube-controller-manager"}

type env struct {
	dir string // state directory
	bin string // directory holding the control-plane binaries
}

func main() {
	fs := flag.NewFlagSet("testenv", flag.ExitOnError)
	dir := fs.String("dir", ".testenv", "state directory (pid files, logs, certificates, kubeconfig, etcd data)")
	bin := fs.String("bin", os.Getenv("HAP_K8S_BIN"), "directory with kube-apiserver, kube-controller-manager, kubectl and etcd")
	timeout := fs.Duration("timeout", 90*time.Second, "how long `up` waits for each component")
	downFor := fs.Duration("down-for", 0, "restart-apiserver: how long kube-apiserver stays stopped")
	grace := fs.Duration("grace", 3*time.Second, "restart-apiserver: how long kube-apiserver may drain after TERM before KILL")
	if len(os.Args) < 2 {
		usage()
	}
	verb := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	abs, err := filepath.Abs(*dir)
	if err != nil {
		fail("cannot resolve --dir %q: %v", *dir, err)
	}
	e := env{dir: abs, bin: *bin}
	switch verb {
	case "up":
		if e.bin == "" {
			fail("no binaries: pass --bin or set HAP_K8S_BIN (e2e/testenv does this for you)")
		}
		if err := e.up(*timeout); err != nil {
			fail("%v", err)
		}
		e.printEnv()
	case "down":
		if err := e.down(); err != nil {
			fail("%v", err)
		}
	case "env":
		e.printEnv()
	case "restart-apiserver":
		if e.bin == "" {
			// The binaries `up` used.
			raw, err := os.ReadFile(e.path("run", "bin"))
			if err != nil {
				fail("no binaries: pass --bin or set HAP_K8S_BIN (e2e/testenv does this for you)")
			}
			e.bin = strings.TrimSpace(string(raw))
		}
		if err := e.restartAPIServer(*downFor, *grace, *timeout); err != nil {
			fail("%v", err)
		}
		fmt.Println("testenv: kube-apiserver restarted; /readyz is ok")
	case "status":
		if err := e.status(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: not healthy: %v\n", err)
			os.Exit(1)
		}
		fmt.Println("testenv: etcd, kube-apiserver and kube-controller-manager are running; /readyz is ok")
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testenv up|down|env|status|restart-apiserver [--dir DIR] [--bin DIR] [--timeout D] [--down-for D] [--grace D]")
	os.Exit(2)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "testenv: "+format+"\n", args...)
	os.Exit(1)
}

func (e env) path(parts ...string) string { return filepath.Join(append([]string{e.dir}, parts...)...) }
func (e env) kubeconfig() string          { return e.path("kubeconfig") }
func (e env) printEnv()                   { fmt.Printf("export KUBECONFIG=%s\n", e.kubeconfig()) }

// up starts whatever is not running. A healthy control plane is left alone; a partial one
// (a component died) is torn down and started afresh, since its data is disposable.
func (e env) up(timeout time.Duration) error {
	if e.status() == nil {
		return nil
	}
	if err := e.down(); err != nil {
		return err
	}
	for _, dir := range []string{e.dir, e.path("pki"), e.path("logs"), e.path("run")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	if err := e.writePKI(); err != nil {
		return fmt.Errorf("writing certificates: %w", err)
	}
	ports, err := freePorts(5)
	if err != nil {
		return err
	}
	etcdClient, etcdPeer, apiPort, kcmPort := ports[0], ports[1], ports[2], ports[3]
	if err := os.WriteFile(e.path("run", "apiserver-port"), []byte(strconv.Itoa(apiPort)), 0o600); err != nil {
		return err
	}

	etcdData := e.path("etcd-data")
	if err := e.start("etcd",
		"--name=testenv",
		"--data-dir="+etcdData,
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", etcdPeer),
		fmt.Sprintf("--initial-cluster=testenv=http://127.0.0.1:%d", etcdPeer),
		"--unsafe-no-fsync=true",
		"--log-level=warn",
		"--quota-backend-bytes=8589934592",
	); err != nil {
		return err
	}
	if err := e.waitFor(timeout, "etcd", func() error {
		return httpOK(&http.Client{Timeout: time.Second}, fmt.Sprintf("http://127.0.0.1:%d/health", etcdClient))
	}); err != nil {
		return err
	}

	pki := func(f string) string { return e.path("pki", f) }
	apiArgs := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcdClient),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", apiPort),
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + e.path("pki"),
		"--tls-cert-file=" + pki("apiserver.crt"),
		"--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki("sa.key"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--token-auth-file=" + pki("tokens.csv"),
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
		"--v=1",
	}
	// Recorded so that restart-apiserver starts the very same server again.
	if raw, err := json.Marshal(apiArgs); err != nil {
		return err
	} else if err := os.WriteFile(e.path("run", "kube-apiserver.args"), raw, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(e.path("run", "bin"), []byte(e.bin), 0o600); err != nil {
		return err
	}
	if err := e.start("kube-apiserver", apiArgs...); err != nil {
		return err
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	token, err := e.waitAPIServer(timeout, base)
	if err != nil {
		return err
	}
	if err := e.writeKubeconfig(base, token); err != nil {
		return err
	}
	if err := e.start("kube-controller-manager",
		"--kubeconfig="+e.kubeconfig(),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", kcmPort),
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+pki("sa.key"),
		"--root-ca-file="+pki("ca.crt"),
		"--controllers=namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller",
		"--v=1",
	); err != nil {
		return err
	}
	return e.waitFor(timeout, "kube-controller-manager", func() error {
		insecure := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		return httpOK(insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort))
	})
}

// waitAPIServer waits until kube-apiserver answers /readyz and serves the `default` namespace
// to the admin token; it returns that token.
func (e env) waitAPIServer(timeout time.Duration, base string) (string, error) {
	client, token, err := e.adminClient()
	if err != nil {
		return "", err
	}
	return token, e.waitFor(timeout, "kube-apiserver", func() error {
		if err := httpOK(client, base+"/readyz"); err != nil {
			return err
		}
		return authedOK(client, token, base+"/api/v1/namespaces/default")
	})
}

// restartAPIServer stops only kube-apiserver, waits downFor, and starts it again with the
// arguments `up` recorded (same ports, certificates, tokens and etcd), appending to its log.
// etcd and kube-controller-manager keep running, as they would through an apiserver rollout.
// Its graceful termination holds open watches for about a minute, hence the short grace.
func (e env) restartAPIServer(downFor, grace, timeout time.Duration) error {
	raw, err := os.ReadFile(e.path("run", "kube-apiserver.args"))
	if err != nil {
		return fmt.Errorf("no recorded kube-apiserver arguments in %s (was it started by `testenv up`?): %w", e.dir, err)
	}
	var args []string
	if err := json.Unmarshal(raw, &args); err != nil {
		return fmt.Errorf("reading %s: %w", e.path("run", "kube-apiserver.args"), err)
	}
	if _, ok := e.pid("etcd"); !ok {
		return errors.New("etcd is not running: run `testenv up` instead")
	}
	port, err := os.ReadFile(e.path("run", "apiserver-port"))
	if err != nil {
		return err
	}
	if pid, ok := e.pid("kube-apiserver"); ok {
		stop(pid, grace)
	}
	time.Sleep(downFor)
	if err := e.startLog("kube-apiserver", true, args...); err != nil {
		return err
	}
	_, err = e.waitAPIServer(timeout, "https://127.0.0.1:"+strings.TrimSpace(string(port)))
	return err
}

// start launches one component in its own session so that it outlives this command, and
// records its pid so that `down` stops exactly it.
func (e env) start(name string, args ...string) error {
	return e.startLog(name, false, args...)
}

// startLog is start, appending to the component's log instead of truncating it when appendLog.
func (e env) startLog(name string, appendLog bool, args ...string) error {
	binary := filepath.Join(e.bin, name)
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("%s: binary not found at %s (run e2e/build-control-plane.sh)", name, binary)
	}
	logPath := e.path("logs", name+".log")
	mode := os.O_TRUNC
	if appendLog {
		mode = os.O_APPEND
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|mode, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: cannot start: %w (log: %s)", name, err, logPath)
	}
	// Record "pid start-time" so that a recycled pid is never mistaken for ours.
	record := fmt.Sprintf("%d %s", cmd.Process.Pid, procStart(cmd.Process.Pid))
	if err := os.WriteFile(e.path("run", name+".pid"), []byte(record), 0o600); err != nil {
		return err
	}
	return cmd.Process.Release()
}

// down stops the recorded processes (TERM, then KILL after 10s) and removes the state
// directory. Processes it did not start are never signalled.
func (e env) down() error {
	for i := len(components) - 1; i >= 0; i-- {
		pid, ok := e.pid(components[i])
		if !ok {
			continue
		}
		stop(pid, 10*time.Second)
	}
	if err := os.RemoveAll(e.dir); err != nil {
		return fmt.Errorf("removing %s: %w", e.dir, err)
	}
	return nil
}

// stop sends TERM to a process we started, and KILL if it is still alive after grace.
func stop(pid int, grace time.Duration) {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if alive(pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		for j := 0; j < 50 && alive(pid); j++ {
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// pid returns the recorded pid of a component if that very process is still alive.
func (e env) pid(name string) (int, bool) {
	raw, err := os.ReadFile(e.path("run", name+".pid"))
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(raw))
	if len(fields) != 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || !alive(pid) || procStart(pid) != fields[1] {
		return 0, false
	}
	return pid, true
}

func (e env) status() error {
	for _, c := range components {
		if _, ok := e.pid(c); !ok {
			return fmt.Errorf("%s is not running", c)
		}
	}
	raw, err := os.ReadFile(e.path("run", "apiserver-port"))
	if err != nil {
		return err
	}
	client, token, err := e.adminClient()
	if err != nil {
		return err
	}
	return authedOK(client, token, fmt.Sprintf("https://127.0.0.1:%s/readyz", strings.TrimSpace(string(raw))))
}

func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	// A zombie is dead for our purposes.
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// procStart is the process start time in clock ticks (field 22 of /proc/PID/stat).
func procStart(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "?"
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "?"
	}
	fields := strings.Fields(s[i+1:])
	if len(fields) < 20 {
		return "?"
	}
	return fields[19]
}

// waitFor polls check until it passes; it gives up at once when the component has exited,
// and names the log to read either way.
func (e env) waitFor(timeout time.Duration, what string, check func() error) error {
	logPath := e.path("logs", what+".log")
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if last = check(); last == nil {
			return nil
		}
		if _, ok := e.pid(what); !ok {
			last = fmt.Errorf("the process exited")
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	tail := ""
	if raw, err := os.ReadFile(logPath); err == nil {
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		tail = "\n  " + strings.Join(lines, "\n  ")
	}
	return fmt.Errorf("%s did not come up (waited up to %s): %v\nread its log: %s%s", what, timeout, last, logPath, tail)
}

func httpOK(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func authedOK(c *http.Client, token, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func (e env) adminClient() (*http.Client, string, error) {
	caPEM, err := os.ReadFile(e.path("pki", "ca.crt"))
	if err != nil {
		return nil, "", err
	}
	token, err := os.ReadFile(e.path("pki", "admin.token"))
	if err != nil {
		return nil, "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, "", errors.New("ca.crt holds no certificate")
	}
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		strings.TrimSpace(string(token)), nil
}

func (e env) writeKubeconfig(server, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: testenv
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: testenv
  context:
    cluster: testenv
    user: admin
current-context: testenv
`, server, e.path("pki", "ca.crt"), token)
	return os.WriteFile(e.kubeconfig(), []byte(cfg), 0o600)
}

// writePKI creates a CA, a serving certificate for 127.0.0.1/localhost, the service-account
// signing key and an admin token in system:masters.
func (e env) writePKI() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hap-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tokenBytes := make([]byte, 24)
	if _, err := rand.Read(tokenBytes); err != nil {
		return err
	}
	token := hex.EncodeToString(tokenBytes)
	files := map[string][]byte{
		"ca.crt":        pemBlock("CERTIFICATE", caDER),
		"apiserver.crt": pemBlock("CERTIFICATE", srvDER),
		"admin.token":   []byte(token + "\n"),
		"tokens.csv":    []byte(fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", token)),
	}
	for name, key := range map[string]*ecdsa.PrivateKey{"apiserver.key": srvKey, "sa.key": saKey, "ca.key": caKey} {
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		files[name] = pemBlock("EC PRIVATE KEY", der)
	}
	for name, data := range files {
		if err := os.WriteFile(e.path("pki", name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
