// Command idlespin exercises the runtime's idle spin (deploy/goruntime/
// overlay.sh) and prints its counters: spins, found, ns spun, and the
// ns the exercise took. Built without the overlay it prints "none".
//
//	idlespin busy WINDOW_NS SHARE N [RESERVED]
//	idlespin alone WINDOW_NS SHARE N [RESERVED]
//
// busy: with GOMAXPROCS=2, one goroutine holds a P in raw system calls
// (the runtime sees it running): N times it sleeps 30µs, writes a byte to
// a pipe and waits for main's answer on another; main reads each byte
// through the runtime's poller and answers, so its thread runs out of work
// before each byte comes. alone: main sleeps
// 5 ms N times with nothing else running. RESERVED Ps are reported to the
// runtime as held by event loops, as tcpproxy's are.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"time"
	"unsafe"
)

// Set by the test's overlay file when the runtime has the idle spin.
var (
	setSpin     func(window, share int64)
	spinStats   func() (spins, found, spentNS int64)
	spinReserve func(delta int64)
)

func main() {
	if setSpin == nil {
		fmt.Println("none")
		return
	}
	mode := os.Args[1]
	window, _ := strconv.ParseInt(os.Args[2], 10, 64)
	share, _ := strconv.ParseInt(os.Args[3], 10, 64)
	n, _ := strconv.Atoi(os.Args[4])
	runtime.GOMAXPROCS(2)
	if len(os.Args) > 5 {
		reserved, _ := strconv.ParseInt(os.Args[5], 10, 64)
		spinReserve(reserved)
	}
	setSpin(window, share)
	start := time.Now()
	switch mode {
	case "busy":
		busy(n)
	case "alone":
		for range n {
			time.Sleep(5 * time.Millisecond)
		}
	default:
		fmt.Fprintln(os.Stderr, "mode busy or alone")
		os.Exit(2)
	}
	took := time.Since(start)
	spins, found, spent := spinStats()
	fmt.Println(spins, found, spent, took.Nanoseconds())
}

func busy(n int) {
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	ackr, ackw, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	wfd, ackfd := w.Fd(), ackr.Fd() // blocking from here on; only the raw calls below use them
	go func() {
		ts := syscall.Timespec{Nsec: 30_000}
		b := []byte{1}
		for range n {
			syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
			syscall.RawSyscall(syscall.SYS_WRITE, wfd, uintptr(unsafe.Pointer(&b[0])), 1)
			// Wait for main's answer, so each of its reads waits.
			for {
				_, _, e := syscall.RawSyscall(syscall.SYS_READ, ackfd, uintptr(unsafe.Pointer(&b[0])), 1)
				if e != syscall.EINTR {
					break
				}
			}
		}
	}()
	buf := make([]byte, 1)
	for range n {
		if _, err := r.Read(buf); err != nil {
			panic(err)
		}
		if _, err := ackw.Write(buf); err != nil {
			panic(err)
		}
	}
}
