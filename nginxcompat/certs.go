package nginxcompat

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// WriteCertificates writes every certificate of cfg to dir as "<uid>.pem"
// (chain then key, the file both ssl_certificate and ssl_certificate_key
// name), mode 0600, atomically: a temp file created 0600 in dir, synced, then
// renamed over the old one. A file whose content is unchanged is not
// rewritten. Certificates with a UID outside [A-Za-z0-9._-] are skipped (the
// renderer leaves their servers without TLS and reports them).
func WriteCertificates(dir string, certs map[string]model.Certificate) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create certificate dir: %w", err)
	}
	for uid, c := range certs {
		if !reUID.MatchString(uid) {
			continue
		}
		dst := filepath.Join(dir, uid+".pem")
		if old, err := os.ReadFile(dst); err == nil && bytes.Equal(old, []byte(c.PEM)) {
			continue
		}
		if err := writeFileAtomic(dst, []byte(c.PEM), 0o600); err != nil {
			return fmt.Errorf("write certificate %s: %w", uid, err)
		}
	}
	return nil
}

// writeFileAtomic creates a temp file with its final mode beside dst, writes,
// syncs and renames it into place.
func writeFileAtomic(dst string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(dst), ".tmp-"+filepath.Base(dst)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = os.Remove(tmp)
		}
	}()
	// CreateTemp makes the file 0600 already; Chmod covers other modes
	// before any byte is written.
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	ok = true
	return nil
}

// PrepareDirs creates the directories a rendered file needs: TempDir (nginx
// creates the *_temp_path children, not their parent) and CertDir (0700).
func PrepareDirs(rc RenderConfig) error {
	rc = rc.withDefaults()
	if err := os.MkdirAll(rc.TempDir, 0o755); err != nil {
		return fmt.Errorf("create nginx temp dir: %w", err)
	}
	if err := os.MkdirAll(rc.CertDir, 0o700); err != nil {
		return fmt.Errorf("create certificate dir: %w", err)
	}
	return nil
}
