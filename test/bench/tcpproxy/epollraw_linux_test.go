package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// TestEpollRawForward relays both ways, with a half-close, through the raw
// epoll forwarder, blocking raw and in Go's system call: a backend that
// echoes what it reads until EOF, then closes.
func TestEpollRawForward(t *testing.T) {
	for _, wait := range []string{"raw", "syscall"} {
		t.Run(wait, func(t *testing.T) {
			t.Setenv("TCPB_EPOLL_WAIT", wait)
			testEpollRawForward(t)
		})
	}
}

func testEpollRawForward(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := serveEpollRawForward(ctx, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	for i, size := range []int{1, 1000, 1 << 20, 3} {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		want := bytes.Repeat([]byte{byte('a' + i)}, size)
		go func() {
			_, _ = c.Write(want)
			_ = c.(*net.TCPConn).CloseWrite()
		}()
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("connection %d: %d bytes back (%v); want %d", i, len(got), err, size)
		}
	}
}
