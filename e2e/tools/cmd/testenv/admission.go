package main

// How kube-apiserver and gardener-apiserver authenticate to admission webhooks: an
// AdmissionConfiguration whose webhook plugins read a kubeconfig that gives every webhook host
// ('*') the client certificate pki/webhook-client.crt, signed by pki/webhook-client-ca.crt. Tests
// start the operator's webhook with that CA as its client CA; a caller without the certificate
// is refused at TLS.

import (
	"fmt"
	"os"
)

// webhookClientCAFile is where tests find the CA of the API servers' webhook client
// certificate (under pki/ of each control plane, the separate garden's included).
const webhookClientCAFile = "webhook-client-ca.crt"

func (e env) admissionConfigFile() string { return e.path("pki", "admission-config.yaml") }

func (e env) writeAdmissionConfig() error {
	kubeconfig := e.path("pki", "webhook-admission.kubeconfig")
	files := map[string]string{
		kubeconfig: fmt.Sprintf(`apiVersion: v1
kind: Config
users:
- name: '*'
  user:
    client-certificate: %s
    client-key: %s
`, e.path("pki", "webhook-client.crt"), e.path("pki", "webhook-client.key")),
		e.path("pki", "webhook-admission.yaml"): fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: WebhookAdmissionConfiguration
kubeConfigFile: %s
`, kubeconfig),
		e.admissionConfigFile(): fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: MutatingAdmissionWebhook
  path: %[1]s
- name: ValidatingAdmissionWebhook
  path: %[1]s
`, e.path("pki", "webhook-admission.yaml")),
	}
	for name, data := range files {
		if err := os.WriteFile(name, []byte(data), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// presentsWebhookClientCert: the API servers of this control plane (and of its garden) were
// started with the admission configuration; a control plane from an older launcher was not.
func (e env) presentsWebhookClientCert(opts options) bool {
	dirs := []env{e}
	if opts.Garden {
		dirs = append(dirs, e.garden())
	}
	for _, d := range dirs {
		if _, err := os.Stat(d.admissionConfigFile()); err != nil {
			return false
		}
	}
	return true
}
