package nginxcompat

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// certFile is the file of one certificate: named by UID and content hash,
// so a new (perhaps broken) certificate never overwrites the one a running
// nginx would read again on restart.
func certFile(dir, uid, pem string) string {
	h := sha256.Sum256([]byte(pem))
	return filepath.Join(dir, uid+"-"+hex.EncodeToString(h[:8])+".pem")
}

// WriteCertificates writes every certificate to dir as certFile names it
// (chain then key, the file both ssl_certificate and ssl_certificate_key
// name), mode 0600, atomically: a temp file created 0600 in dir, synced, then
// renamed into place. An existing file is not rewritten. Certificates with a UID outside [A-Za-z0-9._-] are skipped (the
// renderer leaves their servers without TLS and reports them).
func WriteCertificates(dir string, certs map[string]model.Certificate) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create certificate dir: %w", err)
	}
	for uid, c := range certs {
		if !reUID.MatchString(uid) {
			continue
		}
		dst := certFile(dir, uid, c.PEM)
		if _, err := os.Stat(dst); err == nil {
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

// RemoveStaleCertificates deletes the certificate files in dir that certs
// no longer name; call it after nginx loaded a file that uses only certs.
func RemoveStaleCertificates(dir string, certs map[string]model.Certificate) error {
	keep := map[string]bool{}
	for uid, c := range certs {
		keep[filepath.Base(certFile(dir, uid, c.PEM))] = true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list certificates: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() && filepath.Ext(e.Name()) == ".pem" && !keep[e.Name()] {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove stale certificate: %w", err)
			}
		}
	}
	return nil
}

// WriteClientCAs writes the CA bundles a rendered file names (mode 0600,
// atomically; an existing file is not rewritten): nginx's master reads them
// when it loads the file.
func WriteClientCAs(cas map[string]string) error {
	for path, pem := range cas {
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := writeFileAtomic(path, []byte(pem), 0o600); err != nil {
			return fmt.Errorf("write client CA bundle: %w", err)
		}
	}
	return nil
}

// RemoveStaleClientCAs deletes the CA bundles and revocation lists in dir
// that cas no longer names; call it after nginx loaded a file that uses
// only cas.
func RemoveStaleClientCAs(dir string, cas map[string]string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list client CA bundles: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		ours := (strings.HasPrefix(e.Name(), "client-ca-") && filepath.Ext(e.Name()) == ".crt") ||
			(strings.HasPrefix(e.Name(), "client-crl-") && filepath.Ext(e.Name()) == ".crl") ||
			(strings.HasPrefix(e.Name(), "upstream-ca-") && filepath.Ext(e.Name()) == ".crt") ||
			(strings.HasPrefix(e.Name(), "upstream-cert-") && filepath.Ext(e.Name()) == ".key")
		if _, keep := cas[p]; !keep && !e.IsDir() && ours {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("remove stale client CA bundle: %w", err)
			}
		}
	}
	return nil
}

// WriteAuthFiles writes the basic-authentication files a rendered file
// names into their directory (made 0750), each 0640 and, when this process
// is root, of the group nginx's workers run as (nogroup, nginx's default
// user being nobody), since workers read them per request; an existing file
// is not rewritten. Files the map no longer names are removed by
// RemoveStaleAuthFiles.
func WriteAuthFiles(dir string, files map[string][]byte) error {
	if len(files) == 0 {
		return nil
	}
	gid := -1
	if os.Geteuid() == 0 {
		g, err := user.LookupGroup("nogroup")
		if err != nil {
			return fmt.Errorf("basic authentication files: the workers' group: %w", err)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return fmt.Errorf("basic authentication files: group id %q", g.Gid)
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create basic authentication dir: %w", err)
	}
	if gid >= 0 {
		if err := os.Chown(dir, 0, gid); err != nil {
			return fmt.Errorf("basic authentication dir: %w", err)
		}
	}
	for path, data := range files {
		if filepath.Dir(path) != filepath.Clean(dir) {
			return fmt.Errorf("basic authentication file %s is not in %s", path, dir)
		}
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := writeFileAtomicOwned(path, data, 0o640, gid); err != nil {
			return fmt.Errorf("write basic authentication file: %w", err)
		}
	}
	return nil
}

// writeFileAtomicOwned is writeFileAtomic with the file's group set (when
// gid >= 0) before it is renamed into place.
func writeFileAtomicOwned(dst string, data []byte, mode os.FileMode, gid int) error {
	if gid < 0 {
		return writeFileAtomic(dst, data, mode)
	}
	tmp := dst + ".tmp"
	if err := writeFileAtomic(tmp, data, mode); err != nil {
		return err
	}
	if err := os.Chown(tmp, 0, gid); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, dst)
}

// RemoveStaleAuthFiles deletes the .htpasswd files in dir that files no
// longer names; call it after nginx loaded a file that uses only those.
func RemoveStaleAuthFiles(dir string, files map[string][]byte) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list basic authentication files: %w", err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if _, keep := files[p]; !keep && !e.IsDir() && filepath.Ext(e.Name()) == ".htpasswd" {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("remove stale basic authentication file: %w", err)
			}
		}
	}
	return nil
}
