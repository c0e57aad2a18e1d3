package main

// The admin's HTTP client for kube-apiserver (token in system:masters): readiness checks and
// the few objects the launcher creates (Service, APIServices, the landscape's objects).

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

type adminAPI struct {
	client *http.Client
	token  string
	base   string
}

func (e env) admin() (adminAPI, error) {
	caPEM, err := os.ReadFile(e.path("pki", "ca.crt"))
	if err != nil {
		return adminAPI{}, err
	}
	token, err := os.ReadFile(e.path("pki", "admin.token"))
	if err != nil {
		return adminAPI{}, err
	}
	port := e.readRun("apiserver-port")
	if port == "" {
		return adminAPI{}, fmt.Errorf("no recorded kube-apiserver port in %s", e.path("run"))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return adminAPI{}, errors.New("ca.crt holds no certificate")
	}
	return adminAPI{
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}},
		token:  strings.TrimSpace(string(token)),
		base:   "https://127.0.0.1:" + port,
	}, nil
}

// do sends one request with the admin token; returns the status code and body.
func (a adminAPI) do(method, path string, body any) (int, []byte, error) {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, a.base+path, reader)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

func (a adminAPI) ok(path string) error {
	code, body, err := a.do(http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, code, strings.TrimSpace(string(body)))
	}
	return nil
}

// create POSTs an object to its collection; one that already exists is fine. Right after an
// APIService turns Available the aggregator may still answer 503 for a moment, and
// gardener-apiserver's admission refuses requests until its informers synced ("not yet ready
// to handle request"): both are retried for up to 30 s.
func (a adminAPI) create(collection string, obj map[string]any) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := a.do(http.MethodPost, collection, obj)
		if err == nil && (code == http.StatusCreated || code == http.StatusOK || code == http.StatusConflict) {
			return nil
		}
		transient := err != nil || code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests ||
			(code == http.StatusForbidden && strings.Contains(string(body), "not yet ready"))
		if !transient || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("POST %s: %w", collection, err)
			}
			return fmt.Errorf("POST %s: %d %s", collection, code, strings.TrimSpace(string(body)))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a adminAPI) getJSON(path string, out any) error {
	code, body, err := a.do(http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, code, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, out)
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
