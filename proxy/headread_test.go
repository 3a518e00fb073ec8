package proxy

import (
	"net"
	"strings"
	"testing"
)

// TestLFHeadRead: a head read through lfHead in buffers of any size, 1
// byte up, comes out with CRLF line ends, and what follows the head
// (a body with bare LFs) comes out as sent.
func TestLFHeadRead(t *testing.T) {
	const head = "\n\n\nGET / HTTP/1.1\nHost: x\r\nA: b\n\n"
	const body = "a\nb\n\n"
	want := "\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\n" + body
	for _, tc := range []struct {
		size int
		// piece is how much the client writes at once.
		piece int
	}{{1, 1}, {2, 1}, {3, 1}, {5, 1}, {8, 1}, {2, 64}, {3, 64}, {4, 64}, {5, 64}, {7, 64}, {9, 64}, {64, 64}} {
		size := tc.size
		client, server := net.Pipe()
		go func() {
			for rest := head + body; rest != ""; {
				n := min(tc.piece, len(rest))
				if _, err := client.Write([]byte(rest[:n])); err != nil {
					return
				}
				rest = rest[n:]
			}
			_ = client.Close()
		}()
		var h lfHead
		h.begin(headLimits{small: defaultHeaderBuffer, largeNum: defaultLargeNum, largeSize: defaultLargeSize})
		var got strings.Builder
		buf := make([]byte, size)
		for {
			n, err := h.read(server, buf)
			got.Write(buf[:n])
			if err != nil {
				break
			}
		}
		_ = server.Close()
		// A 1-byte buffer cannot take a bare LF's CR: nothing reads a
		// head that way but fasthttp's first byte.
		if size > 1 && got.String() != want {
			t.Errorf("buffers of %d, writes of %d: got %q; want %q", size, tc.piece, got.String(), want)
		}
		if h.on || h.verdict != 0 {
			t.Errorf("buffers of %d, writes of %d: head still on (%v) or refused (%d); want it ended and taken", size, tc.piece, h.on, h.verdict)
		}
	}
}

// FuzzLFHead reads arbitrary bytes through lfHead in buffers of any size:
// it must not crash, and it may only add a CR before an LF.
func FuzzLFHead(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\nHost: x\n\nbody\n"), uint8(7), uint8(3))
	f.Add([]byte("\n\n\n\n\n\n"), uint8(3), uint8(64))
	f.Add([]byte("GET /"+strings.Repeat("a", 9000)+" HTTP/1.1\r\n\r\n"), uint8(200), uint8(255))
	f.Fuzz(func(t *testing.T, data []byte, size, piece uint8) {
		if size == 0 || piece == 0 {
			return
		}
		client, server := net.Pipe()
		go func() {
			for rest := data; len(rest) > 0; {
				n := min(int(piece), len(rest))
				if _, err := client.Write(rest[:n]); err != nil {
					return
				}
				rest = rest[n:]
			}
			_ = client.Close()
		}()
		var h lfHead
		h.begin(headLimits{small: 64, largeNum: 2, largeSize: 128})
		var got []byte
		buf := make([]byte, size)
		for {
			n, err := h.read(server, buf)
			got = append(got, buf[:n]...)
			if err != nil {
				break
			}
		}
		_ = server.Close()
		if a, b := strings.ReplaceAll(string(got), "\r\n", "\n"), strings.ReplaceAll(string(data), "\r\n", "\n"); a != b {
			t.Errorf("read %q as %q", data, got)
		}
	})
}
