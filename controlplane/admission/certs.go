package admission

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// CertReloader serves a certificate and key from files and loads them
// again when either file changes (its size, modification time or inode:
// cert-manager and kubelet Secret volumes swap a symlink). The files are
// looked at on each TLS handshake, at most once a second; the API server
// keeps its connections to a webhook open, so handshakes are rare.
type CertReloader struct {
	// immutable
	certFile, keyFile string
	interval          time.Duration // between looks at the files

	mu      sync.Mutex // guards the fields below
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

type fileStamp struct {
	size    int64
	modTime time.Time
	ino     uint64
}

// NewCertReloader loads the pair once; an unreadable or invalid pair is an
// error.
func NewCertReloader(certFile, keyFile string) (*CertReloader, error) {
	r := &CertReloader{certFile: certFile, keyFile: keyFile, interval: time.Second}
	if err := r.load(); err != nil {
		return nil, err
	}
	r.checked = time.Now()
	return r, nil
}

// GetCertificate is tls.Config.GetCertificate. When the files changed but
// no longer form a valid pair (a rotation half done), the previous
// certificate keeps being served.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) >= r.interval {
		r.checked = time.Now()
		if st, err := stampFiles(r.certFile, r.keyFile); err == nil && st != r.stamp {
			_ = r.load() // on error the old pair stays; retried a second later
		}
	}
	return r.cert, nil
}

// load reads the pair; mu is held or r is not shared yet.
func (r *CertReloader) load() error {
	st, err := stampFiles(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("admission: load webhook certificate: %w", err)
	}
	r.cert, r.stamp = &cert, st
	return nil
}

func stampFiles(files ...string) ([2]fileStamp, error) {
	var out [2]fileStamp
	for i, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return out, fmt.Errorf("admission: webhook certificate: %w", err)
		}
		out[i] = fileStamp{size: fi.Size(), modTime: fi.ModTime(), ino: inode(fi)}
	}
	return out, nil
}
