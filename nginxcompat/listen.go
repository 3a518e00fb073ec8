package nginxcompat

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
)

// ListenUnix listens on a unix socket at path that appears with its final
// mode (e.g. 0660) and group (gid, or -1 to keep): the socket is bound under
// a temporary name, chmod/chown'ed, then renamed into place, so nginx workers
// never see it missing or with the wrong mode (notes/nginx-lua-shim.md).
// Closing the listener removes path.
func ListenUnix(path string, mode os.FileMode, gid int) (net.Listener, error) {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-"+strconv.Itoa(os.Getpid()))
	_ = os.Remove(tmp)
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("listen on unix socket: %w", err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		_ = ul.Close()
		_ = os.Remove(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(fmt.Errorf("chmod unix socket: %w", err))
	}
	if gid >= 0 {
		if err := os.Chown(tmp, -1, gid); err != nil {
			return fail(fmt.Errorf("chown unix socket: %w", err))
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(fmt.Errorf("install unix socket: %w", err))
	}
	return &unixListener{UnixListener: ul, path: path}, nil
}

type unixListener struct {
	*net.UnixListener
	path string
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	_ = os.Remove(l.path)
	return err
}
