package main

// kube-apiserver's audit log: every request not made with the admin token, at Metadata level
// (who, verb, resource, namespace, name, response code). Requests to aggregated APIs
// (gardener-apiserver) are audited here too, by kube-apiserver, as the requesting user. Tests
// read DIR/logs/audit.log to prove, e.g., that the operator's ServiceAccount never requested a
// Secret.

import "os"

// The admin token is the test harness's, kube-controller-manager's and gardener-apiserver's
// (the latter reads the Secrets bindings reference, on its own account); leaving it out keeps
// the log to the identities under test and small enough for the chaos and load runs.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: None
    users: ["admin", "system:apiserver"]
  - level: None
    nonResourceURLs: ["/healthz*", "/livez*", "/readyz*"]
  - level: Metadata
`

func (e env) auditLog() string { return e.path("logs", "audit.log") }

func (e env) writeAuditPolicy() error {
	return os.WriteFile(e.path("audit-policy.yaml"), []byte(auditPolicy), 0o600)
}

// auditArgs: a JSON-lines log written synchronously (the default blocking mode), so that an
// entry is on disk before its response is sent and a test can read what happened so far.
func (e env) auditArgs() []string {
	return []string{
		"--audit-policy-file=" + e.path("audit-policy.yaml"),
		"--audit-log-path=" + e.auditLog(),
		"--audit-log-format=json",
		"--audit-log-maxsize=0",
	}
}
