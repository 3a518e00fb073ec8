package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// System calls the scheduler does not see. Through net.Conn and os.File
// every read and write is an entersyscall/exitsyscall pair, and two things
// follow from that on a busy proxy:
//
//   - A loopback write, which delivers the segment to the receiver inline,
//     often outlasts the 20 µs after which the runtime's monitor (sysmon)
//     takes the P back from a thread in a system call and starts another
//     thread to run it; the first thread, back from the kernel, finds no P
//     and parks.
//   - When every P has been idle, sysmon sleeps until woken, and the next
//     entersyscall wakes it, at its shortest interval (20 µs) again.
//
// Measured on the product pinned to one CPU at 8 connections
// (docs/benchmarks/product.md, "System calls the scheduler does not see"):
// sysmon woke for about every fifth request and took 8 % of the product's
// CPU, and the handed-off P kept a second thread busy on the same CPU.
//
// So proxied bytes and the access log's batches make their system calls
// raw (syscall.RawSyscall), inside syscall.RawConn's Read and Write, which
// keep Go's poller: a call that would block returns EAGAIN, the callback
// reports it, and the goroutine parks as it would in net.Conn.Read; the
// deadlines and Close work as they do there. A read or write on a
// non-blocking descriptor takes bounded time, so the goroutine keeps its P
// through it, as nginx's worker keeps its CPU.

// rawSyscallConn is a *net.TCPConn whose Read and Write are raw system
// calls. A Read and a Write may run at once (each has its own op); two
// Reads or two Writes may not, as net.Conn serialises them anyway.
type rawSyscallConn struct {
	*net.TCPConn
	rc   syscall.RawConn
	r, w rawOp
}

// rawOp is one direction's call: the buffer, how much of it was done and
// the error number, set by its callback. The callback is bound once per
// connection, so a call allocates nothing.
type rawOp struct {
	b     []byte
	n     int
	errno syscall.Errno
	call  func(fd uintptr) bool
}

// maxRW bounds one system call's length, as Go's poller does.
const maxRW = 1 << 30

// withRawSyscalls wraps c when it is a TCP connection; any other
// connection, or one whose descriptor cannot be had, is returned as it is.
func withRawSyscalls(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &rawSyscallConn{TCPConn: tc, rc: rc}
	rw.r.call = rw.r.read
	rw.w.call = rw.w.send
	return rw
}

// read is a read callback: false (wait until readable) on EAGAIN.
func (o *rawOp) read(fd uintptr) bool {
	n, e := rawIO(syscall.SYS_READ, fd, o.b, 0)
	if e == syscall.EAGAIN {
		return false
	}
	o.n, o.errno = n, e
	return true
}

// rawIO makes one raw read or write-like call (trap) of b, at most maxRW
// bytes, again while interrupted; n is 0 unless e is.
func rawIO(trap, fd uintptr, b []byte, flags uintptr) (n int, e syscall.Errno) {
	if len(b) > maxRW {
		b = b[:maxRW]
	}
	for {
		r, _, e := syscall.RawSyscall6(trap, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), flags, 0, 0)
		if e != syscall.EINTR {
			if e != 0 {
				return 0, e
			}
			return int(r), 0
		}
	}
}

// writeVia writes b with o's callback through rc: RawConn's own error
// (deadline, closed) is returned, the callback's in o.n and o.errno.
func (o *rawOp) writeVia(rc syscall.RawConn, b []byte) error {
	raceReleaseIO(b)
	o.b, o.n, o.errno = b, 0, 0
	err := rc.Write(o.call)
	o.b = nil
	return err
}

// send is a socket's write callback: it writes until the buffer is out,
// false (wait until writable) on EAGAIN. MSG_NOSIGNAL: a peer gone is
// EPIPE, not a signal.
func (o *rawOp) send(fd uintptr) bool {
	return o.writeLoop(fd, syscall.SYS_SENDTO, syscall.MSG_NOSIGNAL)
}

// write is a file's write callback (write(2)), as send.
func (o *rawOp) write(fd uintptr) bool {
	return o.writeLoop(fd, syscall.SYS_WRITE, 0)
}

func (o *rawOp) writeLoop(fd, trap, flags uintptr) bool {
	for o.n < len(o.b) {
		n, e := rawIO(trap, fd, o.b[o.n:], flags)
		switch e {
		case 0:
			o.n += n
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}

// Read reads as net.Conn's Read: io.EOF at the end of the stream, a
// *net.OpError "read" otherwise.
func (c *rawSyscallConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &c.r
	o.b, o.n, o.errno = b, 0, 0
	err := c.rc.Read(o.call)
	o.b = nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case o.errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", o.errno))
	case o.n == 0:
		return 0, io.EOF
	}
	raceAcquireIO()
	return o.n, nil
}

// Write writes all of b unless an error (a *net.OpError "write") stops it.
func (c *rawSyscallConn) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &c.w
	err := o.writeVia(c.rc, b)
	switch {
	case err != nil:
		return o.n, c.opError("write", err)
	case o.errno != 0:
		return o.n, c.opError("write", os.NewSyscallError("write", o.errno))
	}
	return o.n, nil
}

// opError is err as net.Conn's Read and Write give it: a *net.OpError
// named op (RawConn names its own "raw-read" and "raw-write").
func (c *rawSyscallConn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// rawFile is the access log's destination written with raw system calls.
// A pipe (a container's standard output) is written through a description
// of its own opened non-blocking, so a full pipe parks the draining
// goroutine in the poller and holds no P. A regular file is written as
// nginx writes its access log: in the call, which the page cache makes
// short; a disk that stalls the write stalls the P that makes it for that
// long (other Ps serve on), as it stalls nginx's worker.
type rawFile struct {
	f   *os.File // the description written; own is set when opened here
	own bool
	rc  syscall.RawConn
	w   rawOp
}

// rawLogDestination returns a writer for f with raw system calls, and
// whether it could make one: f is a regular file, or a pipe whose
// /proc/self/fd entry can be opened again. The caller closes the writer
// (which closes only what it opened).
func rawLogDestination(f *os.File) (*rawFile, bool) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, false
	}
	var st syscall.Stat_t
	var fd uintptr
	cerr := rc.Control(func(d uintptr) {
		fd = d
		err = syscall.Fstat(int(d), &st)
	})
	if cerr != nil || err != nil {
		return nil, false
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		rf := &rawFile{f: f, rc: rc}
		rf.w.call = rf.w.write
		return rf, true
	case syscall.S_IFIFO:
		// os.OpenFile puts a FIFO's new description in non-blocking mode
		// and in the poller; the O_NONBLOCK also makes the open fail
		// (ENXIO) rather than wait when the pipe has no reader.
		nf, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(fd)), os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, false
		}
		nrc, err := nf.SyscallConn()
		if err != nil {
			_ = nf.Close()
			return nil, false
		}
		rf := &rawFile{f: nf, own: true, rc: nrc}
		rf.w.call = rf.w.write
		return rf, true
	}
	return nil, false
}

// Write writes all of b: for a pipe, waiting in the poller while it is
// full.
func (r *rawFile) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	o := &r.w
	err := o.writeVia(r.rc, b)
	if err == nil && o.errno != 0 {
		err = &os.PathError{Op: "write", Path: r.f.Name(), Err: o.errno}
	}
	return o.n, err
}

// Close closes the description the writer opened, if it did.
func (r *rawFile) Close() error {
	if r.own {
		return r.f.Close()
	}
	return nil
}
