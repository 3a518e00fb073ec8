// Command idlespin exercises the runtime's idle spin (deploy/goruntime/
// overlay.sh) and prints its counters: spins, found, ns spun, and the
// ns the exercise took. Built without the overlay it prints "none".
//
//	idlespin busy WINDOW_NS SHARE N [RESERVED]
//	idlespin alone WINDOW_NS SHARE N [RESERVED]
//
// busy: with GOMAXPROCS=2, one goroutine holds a P in raw system calls
// (the runtime sees it running), sleeping 30µs and then writing a byte to
// a pipe, N times; main reads the N bytes through the runtime's poller, so
// its thread runs out of work before each byte comes. alone: main sleeps
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
	wfd := w.Fd() // blocking from here on; only the raw writes below use it
	go func() {
		ts := syscall.Timespec{Nsec: 30_000}
		b := []byte{1}
		for range n {
			syscall.RawSyscall(syscall.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
			syscall.RawSyscall(syscall.SYS_WRITE, wfd, uintptr(unsafe.Pointer(&b[0])), 1)
		}
	}()
	buf := make([]byte, 1)
	for range n {
		if _, err := r.Read(buf); err != nil {
			panic(err)
		}
	}
}
