// Command order prints, one per line, the connections whose reader
// goroutines ran after a byte came to each of them, in turn, while the only
// P was busy: the order in which the runtime's network poller handed them
// to the scheduler.
package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

const conns = 16

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "order:", err)
		os.Exit(1)
	}
}

func run() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	clientFDs := make([]uintptr, conns)
	servers := make([]net.Conn, conns)
	for i := range conns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		if err := rc.Control(func(fd uintptr) { clientFDs[i] = fd }); err != nil {
			return err
		}
		if servers[i], err = ln.Accept(); err != nil {
			return err
		}
		defer servers[i].Close()
	}
	runtime.GOMAXPROCS(1)
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	started := make(chan struct{}, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			var b [1]byte
			if _, err := servers[i].Read(b[:]); err != nil {
				fmt.Fprintln(os.Stderr, "order: read:", err)
				os.Exit(1)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
		}()
	}
	for range conns {
		<-started
	}
	time.Sleep(50 * time.Millisecond) // every reader waiting in the poller
	// A byte to each in turn with raw system calls, which keep the P, then
	// a busy wait, so that every byte is in before the scheduler polls.
	for _, fd := range clientFDs {
		one := byte(1)
		if _, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&one)), 1); e != 0 {
			return e
		}
	}
	for end := time.Now().Add(2 * time.Millisecond); time.Now().Before(end); {
	}
	wg.Wait()
	for _, i := range order {
		fmt.Println(i)
	}
	return nil
}
