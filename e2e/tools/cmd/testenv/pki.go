package main

// Certificates and credentials: a cluster CA, kube-apiserver's serving certificate, the
// front-proxy CA and client certificate of the aggregation layer, gardener-apiserver's serving
// certificate, the client CA and certificate the API servers present to admission webhooks, the
// service-account signing key and an admin token in system:masters.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

// gardenerServiceDNS is the name kube-apiserver's aggregator verifies gardener-apiserver's
// certificate against: <service>.<namespace>.svc of the APIServices' Service.
const gardenerServiceDNS = "gardener-apiserver.kube-system.svc"

type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

var serial int64 = 1

func newAuthority(cn string, now time.Time) (authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return authority{}, err
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return authority{}, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return authority{}, err
	}
	return authority{cert: cert, key: key, der: der}, nil
}

// issue signs a leaf certificate; returns its PEM and its key's PEM.
func (a authority) issue(tmpl *x509.Certificate, now time.Time) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(7 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := keyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), keyPEM, nil
}

func (e env) writePKI() error {
	now := time.Now()
	ca, err := newAuthority("hap-testenv-ca", now)
	if err != nil {
		return err
	}
	frontProxy, err := newAuthority("hap-testenv-front-proxy-ca", now)
	if err != nil {
		return err
	}
	webhookClients, err := newAuthority("hap-testenv-webhook-client-ca", now)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":             pemBlock("CERTIFICATE", ca.der),
		"front-proxy-ca.crt": pemBlock("CERTIFICATE", frontProxy.der),
		webhookClientCAFile:  pemBlock("CERTIFICATE", webhookClients.der),
	}
	leaves := []struct {
		name string
		by   authority
		tmpl *x509.Certificate
	}{
		{"apiserver", ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "kube-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1"), net.ParseIP(nodeIP)},
			DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		}},
		// kube-apiserver authenticates to aggregated API servers with it; they trust the
		// X-Remote-* headers only from this name, signed by the front-proxy CA.
		{"front-proxy-client", frontProxy, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "front-proxy-client"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
		{"gardener-apiserver", ca, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "gardener-apiserver"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			DNSNames:    []string{gardenerServiceDNS, "gardener-apiserver.kube-system", "localhost"},
		}},
		// kube-apiserver and gardener-apiserver present it to every admission webhook they
		// call (admission.go); a webhook that trusts webhook-client-ca.crt serves only them.
		{"webhook-client", webhookClients, &x509.Certificate{
			Subject:     pkix.Name{CommonName: "hap-testenv-webhook-client"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	}
	for _, l := range leaves {
		cert, key, err := l.by.issue(l.tmpl, now)
		if err != nil {
			return fmt.Errorf("%s certificate: %w", l.name, err)
		}
		files[l.name+".crt"], files[l.name+".key"] = cert, key
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
	files["admin.token"] = []byte(token + "\n")
	files["tokens.csv"] = []byte(fmt.Sprintf("%s,admin,admin,\"system:masters\"\n", token))
	for name, key := range map[string]*ecdsa.PrivateKey{"sa.key": saKey, "ca.key": ca.key} {
		if files[name], err = keyPEM(key); err != nil {
			return err
		}
	}
	for name, data := range files {
		if err := os.WriteFile(e.path("pki", name), data, 0o600); err != nil {
			return err
		}
	}
	return e.writeAdmissionConfig()
}

func keyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
