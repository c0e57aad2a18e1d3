package main

// https-post: what a pod that reaches the admission webhook's port can do without a client
// certificate — POST a hand-made body over TLS — and how far it got. The e2e tests run it in a
// pod of its own image (scripts/testhelper-image.sh) on the node environment: the shipped image
// has no shell or HTTP client, and an attacker brings its own.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

const httpsPostUsage = `usage:
  testhelper https-post (--ca FILE | --insecure) (--body JSON | --body-file FILE) URL...
Prints one JSON line per URL: {"url", "stage", "status", "body", "error"}; stage is "connect"
(no TCP connection), "tls" (the handshake or the server's TLS alert ended it), "http" (TLS held
but no HTTP answer) or "answered". Exit 0 when every URL was answered, 1 when one was not,
2 on usage errors.`

// postResult is one output line.
type postResult struct {
	URL    string `json:"url"`
	Stage  string `json:"stage"`
	Status int    `json:"status,omitempty"`
	Body   string `json:"body,omitempty"`
	Error  string `json:"error,omitempty"`
}

type postArgs struct {
	caFile   string
	insecure bool
	body     []byte
	urls     []string
}

func parsePostArgs(args []string) (postArgs, error) {
	var p postArgs
	haveBody := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		next := func() (string, error) {
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", a)
			}
			i++
			return args[i], nil
		}
		var err error
		switch a {
		case "--insecure":
			p.insecure = true
		case "--ca":
			p.caFile, err = next()
		case "--body":
			var v string
			v, err = next()
			p.body, haveBody = []byte(v), true
		case "--body-file":
			var f string
			if f, err = next(); err == nil {
				p.body, err = os.ReadFile(f)
				haveBody = true
			}
		default:
			p.urls = append(p.urls, a)
		}
		if err != nil {
			return p, err
		}
	}
	switch {
	case p.insecure == (p.caFile != ""):
		return p, errors.New("exactly one of --ca and --insecure")
	case !haveBody:
		return p, errors.New("--body or --body-file is required")
	case len(p.urls) == 0:
		return p, errors.New("at least one URL")
	}
	return p, nil
}

func httpsPost(args []string, stdout, stderr io.Writer) int {
	p, err := parsePostArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "testhelper https-post: %v\n%s\n", err, httpsPostUsage)
		return 2
	}
	// No client certificate: the request of the attack.
	cfg := &tls.Config{InsecureSkipVerify: p.insecure}
	if p.caFile != "" {
		pem, err := os.ReadFile(p.caFile)
		if err != nil {
			fmt.Fprintf(stderr, "testhelper https-post: %v\n", err)
			return 2
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			fmt.Fprintf(stderr, "testhelper https-post: no certificate in %s\n", p.caFile)
			return 2
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	code := 0
	for _, u := range p.urls {
		res := postOnce(cfg, u, p.body)
		if res.Stage != "answered" {
			code = 1
		}
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "testhelper https-post: %v\n", err)
			return 2
		}
	}
	return code
}

// postOnce dials, handshakes and sends by hand, so the result says which step failed. With
// TLS 1.3 a client's handshake ends before the server has judged its (absent) certificate; the
// server's refusal then arrives as an alert on the first read, which counts as "tls" too.
func postOnce(base *tls.Config, raw string, body []byte) postResult {
	res := postResult{URL: raw}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		res.Stage, res.Error = "connect", fmt.Sprintf("not an https URL: %q", raw)
		return res
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		res.Stage, res.Error = "connect", err.Error()
		return res
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	cfg := base.Clone()
	cfg.ServerName = u.Hostname()
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		res.Stage, res.Error = "tls", err.Error()
		return res
	}
	if err := awaitRefusal(tc); err != nil {
		res.Stage, res.Error = stageOf(err), err.Error()
		return res
	}
	req, err := http.NewRequest(http.MethodPost, raw, bytes.NewReader(body))
	if err != nil {
		res.Stage, res.Error = "connect", err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Close = true
	if err := req.Write(tc); err != nil {
		// A server that refused us may have closed before our write: its alert is in the input.
		var one [1]byte
		if _, rerr := tc.Read(one[:]); rerr != nil && stageOf(rerr) == "tls" {
			err = rerr
		}
		res.Stage, res.Error = stageOf(err), err.Error()
		return res
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), req)
	if err != nil {
		res.Stage, res.Error = stageOf(err), err.Error()
		return res
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		res.Stage, res.Error = stageOf(err), err.Error()
		return res
	}
	res.Stage, res.Status, res.Body = "answered", resp.StatusCode, string(answer)
	return res
}

// awaitRefusal reads briefly before anything is sent. In TLS 1.3 the server judges the client's
// certificate after the client's handshake has ended; a refusal is an alert that arrives within
// milliseconds. A server that accepted sends nothing before the request (its session tickets are
// handled inside crypto/tls), so the read times out and the connection stays usable (a timeout
// does not poison a tls.Conn).
func awaitRefusal(tc *tls.Conn) error {
	_ = tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	var one [1]byte
	n, err := tc.Read(one[:])
	var ne net.Error
	switch {
	case err != nil && errors.As(err, &ne) && ne.Timeout():
		return tc.SetDeadline(time.Now().Add(20 * time.Second))
	case err != nil:
		return err
	case n > 0:
		return errors.New("the server sent data before the request")
	}
	return tc.SetDeadline(time.Now().Add(20 * time.Second))
}

// stageOf: a TLS alert from the server (crypto/tls reports it as a net.OpError "remote error")
// is a refusal at TLS; anything else after the handshake is an HTTP-level failure.
func stageOf(err error) string {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return "tls"
	}
	return "http"
}
