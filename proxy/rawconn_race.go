//go:build linux && race

package proxy

import "syscall"

// Under the race detector, package syscall marks each write(2) a release
// and each read(2) an acquire of one object it shares between them all:
// a write to a socket happens before the read that gets its bytes, as the
// kernel orders them. Raw system calls carry no such mark, so a goroutine
// that orders itself after another through a connection (a test that
// checks what a handler recorded once its answer came) would be reported
// as racing with it. In race builds each raw write is therefore preceded
// by a write of the same bytes to /dev/null through package syscall (the
// release, and the buffer marked read), and each raw read followed by an
// empty read from it (the acquire). Race builds only: the kernel gives the
// ordering, this only tells the race detector.
var devNull = func() int {
	fd, err := syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		panic("proxy: race build cannot open /dev/null: " + err.Error())
	}
	return fd
}()

// raceReleaseIO marks the start of a write of b.
func raceReleaseIO(b []byte) { _, _ = syscall.Write(devNull, b) }

// raceAcquireIO marks the end of a read.
func raceAcquireIO() { _, _ = syscall.Read(devNull, nil) }
