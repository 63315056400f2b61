package webhook

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Certificate lifetimes: the serving certificate is renewed once less than
// renewBefore of it is left, and the CA that signs it outlives many.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	servingLifetime = 365 * 24 * time.Hour
	renewBefore     = 30 * 24 * time.Hour
)

// The keys of the Secret and of a --webhook-cert-dir, as cert-manager
// writes them; the Secret also keeps the CA it replaced, while that lasts.
const (
	keyCA         = "ca.crt"
	keyCert       = "tls.crt"
	keyKey        = "tls.key"
	keyPreviousCA = "ca-previous.crt"
)

// Reread is how long SecretCerts serves the bundle it last read before it
// reads the Secret again: another replica may have renewed it, or replaced
// its CA.
const Reread = time.Minute

// Bundle is a serving certificate and the CA the API server verifies it
// against.
type Bundle struct {
	// CA is what the API server verifies against (caBundle): the CA's
	// PEM, followed by the CA it replaced while that one lasts.
	CA   []byte
	Cert tls.Certificate
	// NotAfter is when the serving certificate expires.
	NotAfter time.Time
}

// CertSource gives the serving certificate, kept current.
type CertSource interface {
	// Current returns the bundle to serve now, renewing it first if it
	// is due.
	Current(ctx context.Context) (*Bundle, error)
}

// SecretCerts keeps a self-signed CA and a serving certificate in a Secret,
// so that every replica serves the same one and a restart keeps it. No
// cert-manager is needed.
type SecretCerts struct {
	Kube      kubernetes.Interface
	Namespace string
	Name      string
	// Hosts are the names the API server dials: DNS names and IPs.
	Hosts []string
	Now   func() time.Time

	mu     sync.Mutex
	last   *Bundle
	readAt time.Time
}

var _ CertSource = (*SecretCerts)(nil)

// Current returns the bundle it last read for up to Reread, while that
// lasts; then it reads the Secret, and writes a new bundle there when it
// lacks one, names other hosts, or expires within renewBefore. The CA is
// kept while it lasts, so a renewal needs no new caBundle. Reading again
// every Reread is what keeps replicas serving one CA: without it, a
// replica kept serving a certificate of a CA another had replaced, and the
// API server's calls to it failed open. A read that fails keeps the
// bundle it has while that lasts.
func (s *SecretCerts) Current(ctx context.Context) (*Bundle, error) {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	valid := s.last != nil && s.last.NotAfter.Sub(now()) > renewBefore && covers(s.last.Cert.Leaf, s.Hosts)
	if valid && now().Sub(s.readAt) < Reread {
		return s.last, nil
	}
	b, err := s.read(ctx, now)
	if err != nil && valid {
		return s.last, nil
	}
	if err == nil {
		s.last, s.readAt = b, now()
	}
	return b, err
}

func (s *SecretCerts) read(ctx context.Context, now func() time.Time) (*Bundle, error) {
	secret, err := s.Kube.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	if err == nil {
		b, err := parseBundle(secret.Data[keyCA], secret.Data[keyCert], secret.Data[keyKey])
		if err == nil && b.NotAfter.Sub(now()) > renewBefore && covers(b.Cert.Leaf, s.Hosts) {
			b.CA = caBundle(secret.Data[keyCA], secret.Data[keyPreviousCA], now())
			return b, nil
		}
	}
	var ca *authority
	var previous []byte
	if secret != nil {
		ca, _ = parseAuthority(secret.Data[keyCA], secret.Data["ca.key"], now())
		previous = secret.Data[keyPreviousCA]
	}
	if ca == nil {
		if ca, err = newAuthority(now()); err != nil {
			return nil, err
		}
		if secret != nil {
			// The CA replaced: replicas serve its certificates until
			// they read the Secret again.
			previous = secret.Data[keyCA]
		}
	}
	certPEM, keyPEM, err := ca.issue(s.Hosts, now())
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{keyCA: ca.certPEM, "ca.key": ca.keyPEM, keyCert: certPEM, keyKey: keyPEM}
	if lasts(previous, now()) {
		data[keyPreviousCA] = previous
	}
	if secret == nil || secret.Name == "" {
		_, err = s.Kube.CoreV1().Secrets(s.Namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{"app.kubernetes.io/managed-by": "helm-locker"}},
			Type:       corev1.SecretTypeTLS, Data: data,
		}, metav1.CreateOptions{})
	} else {
		secret = secret.DeepCopy()
		secret.Data = data
		_, err = s.Kube.CoreV1().Secrets(s.Namespace).Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		// Another replica may have written it first: read its bundle
		// next time.
		return nil, fmt.Errorf("writing Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	b, err := parseBundle(ca.certPEM, certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	b.CA = caBundle(ca.certPEM, data[keyPreviousCA], now())
	return b, nil
}

// caBundle is what the API server verifies against: the CA, and the one it
// replaced while that lasts, so that a replica still serving a certificate
// of the old CA is verified until it reads the new one.
func caBundle(current, previous []byte, now time.Time) []byte {
	if !lasts(previous, now) || bytes.Equal(bytes.TrimSpace(current), bytes.TrimSpace(previous)) {
		return current
	}
	out := bytes.Clone(current)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, previous...)
}

// lasts reports whether certPEM is a certificate still valid at now.
func lasts(certPEM []byte, now time.Time) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	return err == nil && now.Before(cert.NotAfter)
}

// DirCerts reads a bundle from a folder, such as a cert-manager Secret
// mounted there: ca.crt, tls.crt and tls.key. It reads them again when
// tls.crt changes.
type DirCerts struct {
	Dir string

	mu       sync.Mutex
	last     *Bundle
	modified time.Time
}

var _ CertSource = (*DirCerts)(nil)

// Current returns the folder's bundle, read again if tls.crt changed.
func (d *DirCerts) Current(context.Context) (*Bundle, error) {
	info, err := os.Stat(filepath.Join(d.Dir, keyCert))
	if err != nil {
		return nil, fmt.Errorf("--webhook-cert-dir: %w", err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.last != nil && info.ModTime().Equal(d.modified) {
		return d.last, nil
	}
	var data [3][]byte
	for i, name := range []string{keyCA, keyCert, keyKey} {
		b, err := os.ReadFile(filepath.Join(d.Dir, name))
		if err != nil {
			return nil, fmt.Errorf("--webhook-cert-dir: %w", err)
		}
		data[i] = b
	}
	b, err := parseBundle(data[0], data[1], data[2])
	if err != nil {
		return nil, fmt.Errorf("--webhook-cert-dir: %w", err)
	}
	d.last, d.modified = b, info.ModTime()
	return b, nil
}

func parseBundle(caPEM, certPEM, keyPEM []byte) (*Bundle, error) {
	if len(caPEM) == 0 {
		return nil, errors.New("no CA certificate")
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &Bundle{CA: caPEM, Cert: cert, NotAfter: cert.Leaf.NotAfter}, nil
}

// covers reports whether cert names every host.
func covers(cert *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
				return false
			}
		} else if !slices.Contains(cert.DNSNames, h) {
			return false
		}
	}
	return true
}

// authority is a self-signed CA.
type authority struct {
	cert            *x509.Certificate
	key             *ecdsa.PrivateKey
	certPEM, keyPEM []byte
}

func newAuthority(now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "helm-locker webhook CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})}, nil
}

// parseAuthority reads a CA back, if it lasts past the next serving
// certificate.
func parseAuthority(certPEM, keyPEM []byte, now time.Time) (*authority, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, errors.New("no CA")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	if cert.NotAfter.Before(now.Add(servingLifetime)) {
		return nil, errors.New("CA expires too soon")
	}
	return &authority{cert: cert, key: key, certPEM: bytes.Clone(certPEM), keyPEM: bytes.Clone(keyPEM)}, nil
}

// issue signs a serving certificate for hosts.
func (a *authority) issue(hosts []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "helm-locker webhook"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(servingLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
