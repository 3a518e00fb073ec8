package tcpproxy

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/controlplane/model"
)

// Out of descriptors, the proxy keeps accepting once descriptors are free
// again, and no connection hangs: the goroutine path backs off and accepts
// again (its accept loop used to end for good), the event loops stop
// accepting for a while rather than spin on the listener.
func TestAcceptOutOfDescriptors(t *testing.T) {
	backend := listen(t, func(c net.Conn) {
		defer c.Close()
		_, _ = io.Copy(c, c)
	})
	addr := tcpService(t, Config{}, model.L4Service{Backend: "emfile"}, backend)
	to := netip.MustParseAddrPort(addr)
	const clients = 4
	var fds [clients]int
	for i := range fds {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds[i] = fd
	}
	files := make([]*os.File, clients) // own the sockets from here on
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "client")
		defer files[i].Close()
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	runtime.GC() // earlier tests' descriptors closed by finalizers go now
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	low := lim
	low.Cur = uint64(len(open) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	// Whatever is spare under the lowered limit is taken, so the proxy
	// has not one descriptor left.
	var fillers []int
	fill := func() {
		for {
			fd, err := syscall.Dup(fds[0])
			if err != nil {
				return
			}
			fillers = append(fillers, fd)
		}
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			for _, fd := range fillers {
				_ = syscall.Close(fd)
			}
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer restore()
	fill()
	for _, fd := range fds {
		fill()
		if err := syscall.Connect(fd, &syscall.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}); err != nil {
			restore()
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // the proxy meets EMFILE meanwhile
	restore()
	// A connection taken while a descriptor happened to be free (the
	// process has other goroutines) may have been closed for want of an
	// upstream socket, as nginx closes it; none may hang.
	for i, f := range files {
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
		msg := "client " + strconv.Itoa(i)
		_, _ = io.WriteString(c, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) || err == nil && string(got) != msg {
			t.Errorf("%s: echoed %q, %v; want the echo or the connection closed", msg, got, err)
		}
		c.Close()
	}
	// Accepting goes on: a new connection is served.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(defaultTestTimeout))
	_, _ = io.WriteString(c, "after")
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "after" {
		t.Errorf("a connection after the descriptors came back: %q, %v", got, err)
	}
}
