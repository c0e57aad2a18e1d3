package main

// The Kubernetes control plane: etcd, kube-apiserver (with the aggregation layer and an audit
// log) and kube-controller-manager, and the restart of kube-apiserver alone.

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"
)

type portSet struct {
	etcdClient, etcdPeer, api, kcm, gardener int
}

func (e env) startControlPlane(p portSet) error {
	if err := e.writeRun("apiserver-port", strconv.Itoa(p.api)); err != nil {
		return err
	}
	if err := e.writeRun("etcd-port", strconv.Itoa(p.etcdClient)); err != nil {
		return err
	}
	if err := e.start("etcd",
		"--name=testenv",
		"--data-dir="+e.path("etcd-data"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", p.etcdClient),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", p.etcdClient),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", p.etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", p.etcdPeer),
		fmt.Sprintf("--initial-cluster=testenv=http://127.0.0.1:%d", p.etcdPeer),
		"--unsafe-no-fsync=true",
		"--log-level=warn",
		"--quota-backend-bytes=8589934592",
	); err != nil {
		return err
	}
	if err := e.waitFor("etcd", func() error {
		return httpOK(e.inNode(&http.Client{Timeout: time.Second}), fmt.Sprintf("http://127.0.0.1:%d/health", p.etcdClient))
	}); err != nil {
		return err
	}

	pki := func(f string) string { return e.path("pki", f) }
	apiArgs := []string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p.etcdClient),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.api),
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
		"--admission-control-config-file=" + e.admissionConfigFile(),
		"--allow-privileged=true",
		profilingArg(),
		"--v=1",
	}
	apiArgs = append(apiArgs, aggregationArgs(pki)...)
	apiArgs = append(apiArgs, e.auditArgs()...)
	apiArgs, err := e.netnsAPIServerArgs(apiArgs)
	if err != nil {
		return err
	}
	// Recorded so that restart-apiserver starts the very same server again.
	if raw, err := json.Marshal(apiArgs); err != nil {
		return err
	} else if err := e.writeRun("kube-apiserver.args", string(raw)); err != nil {
		return err
	}
	if err := e.start("kube-apiserver", apiArgs...); err != nil {
		return err
	}
	if e.netns != "" {
		if err := e.startForward(p.api); err != nil {
			return err
		}
	}
	api, err := e.admin()
	if err != nil {
		return err
	}
	if err := e.waitAPIServer(api); err != nil {
		return err
	}
	if err := e.writeKubeconfig(api.base, api.token); err != nil {
		return err
	}
	if err := e.start("kube-controller-manager", e.nodeKCMArgs(
		"--kubeconfig="+e.kubeconfig(),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.kcm),
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+pki("sa.key"),
		"--root-ca-file="+pki("ca.crt"),
		"--controllers=namespace-controller,garbage-collector-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller",
		"--v=1",
	)...); err != nil {
		return err
	}
	return e.waitFor("kube-controller-manager", func() error {
		insecure := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		return httpOK(e.inNode(insecure), fmt.Sprintf("https://127.0.0.1:%d/healthz", p.kcm))
	})
}

// aggregationArgs are kube-apiserver's flags for the aggregation layer: which client
// certificate it presents to aggregated API servers, and which front-proxy CA and name they
// (and it) trust for the X-Remote-* identity headers.
func aggregationArgs(pki func(string) string) []string {
	return []string{
		"--requestheader-client-ca-file=" + pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pki("front-proxy-client.key"),
	}
}

// waitAPIServer waits until kube-apiserver answers /readyz and serves the `default` namespace
// to the admin token.
func (e env) waitAPIServer(api adminAPI) error {
	return e.waitFor("kube-apiserver", func() error {
		if err := httpOK(api.client, api.base+"/readyz"); err != nil {
			return err
		}
		return api.ok("/api/v1/namespaces/default")
	})
}

// restartAPIServer stops only kube-apiserver, waits downFor, and starts it again with the
// arguments `up` recorded (same ports, certificates, tokens and etcd), appending to its log.
// etcd, kube-controller-manager and gardener-apiserver keep running, as they would through an
// apiserver rollout. Its graceful termination holds open watches for about a minute, hence the
// short grace.
func (e env) restartAPIServer(downFor, grace time.Duration) error {
	var args []string
	if err := json.Unmarshal([]byte(e.readRun("kube-apiserver.args")), &args); err != nil {
		return fmt.Errorf("no recorded kube-apiserver arguments in %s (was it started by `testenv up`?): %w", e.dir, err)
	}
	if _, ok := e.pid("etcd"); !ok {
		return errors.New("etcd is not running: run `testenv up` instead")
	}
	if pid, ok := e.pid("kube-apiserver"); ok {
		stop(pid, grace)
	}
	time.Sleep(downFor)
	if err := e.startBinary("kube-apiserver", e.bin+"/kube-apiserver", true, args...); err != nil {
		return err
	}
	api, err := e.admin()
	if err != nil {
		return err
	}
	return e.waitAPIServer(api)
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
