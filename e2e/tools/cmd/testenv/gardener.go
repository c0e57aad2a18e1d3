package main

// gardener-apiserver as an aggregated API server: it shares etcd (under its own prefix
// /registry-gardener), delegates authentication and authorization to kube-apiserver, runs its
// default admission plugins, and is reached through an ExternalName Service and one APIService
// per group-version.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// gardenerAPIServices: group-version → version priority (v1beta1 is core's preferred version:
// Shoots, bindings' SecretBinding and CloudProfiles live there).
var gardenerAPIServices = map[string]int{
	"v1beta1.core.gardener.cloud":            20,
	"v1.core.gardener.cloud":                 10,
	"v1alpha1.security.gardener.cloud":       10,
	"v1alpha1.seedmanagement.gardener.cloud": 10,
	"v1alpha1.settings.gardener.cloud":       10,
	"v1alpha1.operations.gardener.cloud":     10,
}

func (e env) startGardener(p portSet) error {
	if err := e.writeRun("gardener-port", strconv.Itoa(p.gardener)); err != nil {
		return err
	}
	pki := func(f string) string { return e.path("pki", f) }
	args := []string{
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", p.gardener),
		"--tls-cert-file=" + pki("gardener-apiserver.crt"),
		"--tls-private-key-file=" + pki("gardener-apiserver.key"),
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", p.etcdClient),
		"--cluster-identity=" + e.clusterIdentity(),
		"--kubeconfig=" + e.kubeconfig(),
		"--authentication-kubeconfig=" + e.kubeconfig(),
		"--authorization-kubeconfig=" + e.kubeconfig(),
		"--authorization-always-allow-paths=/healthz,/readyz,/livez",
		"--admission-control-config-file=" + e.admissionConfigFile(),
		profilingArg(),
		"--log-level=info",
	}
	if raw, err := json.Marshal(args); err != nil {
		return err
	} else if err := e.writeRun("gardener-apiserver.args", string(raw)); err != nil {
		return err
	}
	if e.netns != "" {
		if err := e.writeHostsFile(); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := e.startBinary("gardener-apiserver", e.gardenerBin, false, args...); err != nil {
		return err
	}
	if err := e.waitGardenerReady(); err != nil {
		return err
	}
	ready := time.Since(start)
	api, err := e.admin()
	if err != nil {
		return err
	}
	if err := e.registerGardener(api, p.gardener); err != nil {
		return fmt.Errorf("registering gardener-apiserver: %w", err)
	}
	if err := e.waitAPIServicesAvailable(api); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "testenv: gardener-apiserver (%s) ready in %.1fs, its APIServices Available %.1fs after its start\n",
		e.clusterIdentity(), ready.Seconds(), time.Since(start).Seconds())
	return nil
}

func (e env) clusterIdentity() string {
	if strings.HasSuffix(e.dir, "/garden") {
		return "testenv-garden"
	}
	return "testenv"
}

// waitGardenerReady polls gardener-apiserver's own /readyz, verifying its serving certificate
// as the aggregator will (CA and Service DNS name).
func (e env) waitGardenerReady() error {
	caPEM, err := os.ReadFile(e.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: gardenerServiceDNS},
	}}
	url := "https://127.0.0.1:" + e.readRun("gardener-port") + "/readyz"
	return e.waitFor("gardener-apiserver", func() error { return httpOK(e.inNode(client), url) })
}

// registerGardener creates the ExternalName Service (a selector-less Service with Endpoints
// cannot point at loopback) and the APIServices. Both survive restarts of either server.
func (e env) registerGardener(api adminAPI, port int) error {
	svc := map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "gardener-apiserver", "namespace": "kube-system"},
		"spec": map[string]any{
			"type": "ExternalName", "externalName": "127.0.0.1",
			"ports": []any{map[string]any{"name": "https", "port": port, "protocol": "TCP"}},
		},
	}
	if err := api.create("/api/v1/namespaces/kube-system/services", svc); err != nil {
		return err
	}
	caPEM, err := os.ReadFile(e.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	for name, priority := range gardenerAPIServices {
		version, group, _ := strings.Cut(name, ".")
		obj := map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": name},
			"spec": map[string]any{
				"group": group, "version": version,
				"groupPriorityMinimum": 10000, "versionPriority": priority,
				"caBundle": base64.StdEncoding.EncodeToString(caPEM),
				"service":  map[string]any{"namespace": "kube-system", "name": "gardener-apiserver", "port": port},
			},
		}
		if err := api.create("/apis/apiregistration.k8s.io/v1/apiservices", obj); err != nil {
			return err
		}
	}
	return nil
}

// apiServicesAvailable is nil when every Gardener APIService reports Available=True.
func (a adminAPI) apiServicesAvailable() error {
	var missing []string
	for name := range gardenerAPIServices {
		var svc struct {
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string } `json:"conditions"`
			} `json:"status"`
		}
		if err := a.getJSON("/apis/apiregistration.k8s.io/v1/apiservices/"+name, &svc); err != nil {
			missing = append(missing, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		available := false
		for _, c := range svc.Status.Conditions {
			if c.Type == "Available" {
				available = c.Status == "True"
				if !available {
					missing = append(missing, fmt.Sprintf("%s: %s %s", name, c.Reason, c.Message))
				}
			}
		}
		if !available && len(svc.Status.Conditions) == 0 {
			missing = append(missing, name+": no conditions yet")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return errors.New("APIServices not Available: " + strings.Join(missing, "; "))
	}
	// Available is set before every kube-apiserver handler routes the group (a moment of
	// "404 page not found"): each group-version must answer through the aggregator too.
	for name := range gardenerAPIServices {
		version, group, _ := strings.Cut(name, ".")
		if err := a.ok("/apis/" + group + "/" + version); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return errors.New("Gardener API not routed yet: " + strings.Join(missing, "; "))
	}
	return nil
}

func (e env) waitAPIServicesAvailable(api adminAPI) error {
	return e.waitFor("gardener-apiserver", api.apiServicesAvailable)
}

// restartGardener stops only gardener-apiserver and starts it again with its recorded
// arguments (same port, certificate and etcd prefix); its objects stay in etcd and its
// APIServices in kube-apiserver, which reports them unavailable meanwhile. disableAdmission
// (comma-separated plugin names) turns those plugins off for this start only: a benchmark's bulk
// setup of bindings would otherwise wait for ResourceReferenceManager, whose two Secret requests
// per binding go through gardener-apiserver's own client at client-go's default 5 requests/s.
func (e env) restartGardener(downFor, grace time.Duration, disableAdmission string) error {
	if !e.recordedOptions().Gardener {
		return fmt.Errorf("this control plane (%s) serves no Gardener API", e.dir)
	}
	if e.gardenerBin == "" {
		return errors.New("no gardener-apiserver binary recorded: pass --gardener-bin")
	}
	var args []string
	if err := json.Unmarshal([]byte(e.readRun("gardener-apiserver.args")), &args); err != nil {
		return fmt.Errorf("no recorded gardener-apiserver arguments in %s: %w", e.dir, err)
	}
	if disableAdmission != "" {
		args = append(args, "--disable-admission-plugins="+disableAdmission)
	}
	if pid, ok := e.pid("gardener-apiserver"); ok {
		stop(pid, grace)
	}
	time.Sleep(downFor)
	if err := e.startBinary("gardener-apiserver", e.gardenerBin, true, args...); err != nil {
		return err
	}
	if err := e.waitGardenerReady(); err != nil {
		return err
	}
	api, err := e.admin()
	if err != nil {
		return err
	}
	return e.waitAPIServicesAvailable(api)
}
