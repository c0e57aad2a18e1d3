// Certificates of the node (kubelet serving and client, the apiserver's client for the kubelet)
// and the pause image: an OCI archive written here around the `pause` binary that
// build-control-plane.sh compiles from the kubernetes module's pause.c.

package main

import (
	"archive/tar"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// writeNodePKI issues, from the environment's CA, the kubelet's serving certificate (node IP),
// the kubelet's client certificate (system:node:<name> in system:nodes, for the Node authorizer)
// and the client certificate kube-apiserver presents to the kubelet (system:masters).
func (e env) writeNodePKI() error {
	caPEM, err := os.ReadFile(e.path("pki", "ca.crt"))
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(e.path("pki", "ca.key"))
	if err != nil {
		return err
	}
	caBlock, _ := pem.Decode(caPEM)
	keyBlock, _ := pem.Decode(keyPEM)
	if caBlock == nil || keyBlock == nil {
		return errors.New("pki: ca.crt or ca.key holds no PEM block")
	}
	caCert, err := x509.ParseCertificate(caBlock.Bytes)
	if err != nil {
		return err
	}
	caKey, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return err
	}
	now := time.Now()
	issue := func(name string, serial int64, tmpl x509.Certificate) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore = now.Add(-time.Hour)
		tmpl.NotAfter = now.Add(7 * 24 * time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, &tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(e.path("pki", name+".crt"), pemBlock("CERTIFICATE", der), 0o600); err != nil {
			return err
		}
		return os.WriteFile(e.path("pki", name+".key"), pemBlock("EC PRIVATE KEY", kder), 0o600)
	}
	if err := issue("kubelet", 10, x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeName},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP(nodeIP)},
		DNSNames:    []string{nodeName},
	}); err != nil {
		return err
	}
	if err := issue("node", 11, x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return err
	}
	return issue("apiserver-kubelet-client", 12, x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func insecureTransport() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
}

// writePauseArchive writes the pause image as an OCI archive (one layer holding /pause, run as
// 65535 like the upstream image) and returns its path. Deterministic: same binary, same digest.
func (e env) writePauseArchive() (string, error) {
	bin := filepath.Join(e.bin, "pause")
	pause, err := os.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("the pause binary is missing (%v): e2e/build-control-plane.sh compiles it from the kubernetes module's pause.c with musl-gcc (scripts/ensure-node-tools.sh node installs musl-tools)", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(pause)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
		return "", err
	}
	if _, err := tw.Write(pause); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	digest := func(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }
	layerDigest := digest(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/pause"}, "User": "65535:65535"},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return "", err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(config), "size": len(config)},
		"layers":        []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layer.Len()}},
	})
	if err != nil {
		return "", err
	}
	tag := pauseImage[strings.LastIndex(pauseImage, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json",
			"digest":    digest(manifest),
			"size":      len(manifest),
			"annotations": map[string]string{
				"io.containerd.image.name":          pauseImage,
				"org.opencontainers.image.ref.name": tag,
			},
		}},
	})
	if err != nil {
		return "", err
	}
	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	add := func(name string, data []byte) error {
		if err := aw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := aw.Write(data)
		return err
	}
	blob := func(d string) string { return "blobs/sha256/" + strings.TrimPrefix(d, "sha256:") }
	for _, f := range []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blob(digest(manifest)), manifest},
		{blob(digest(config)), config},
		{blob(layerDigest), layer.Bytes()},
	} {
		if err := add(f.name, f.data); err != nil {
			return "", err
		}
	}
	if err := aw.Close(); err != nil {
		return "", err
	}
	path := e.path("images", "pause.oci.tar")
	return path, os.WriteFile(path, archive.Bytes(), 0o600)
}
