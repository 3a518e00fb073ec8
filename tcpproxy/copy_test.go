package tcpproxy

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// Issue 7: proxyCopy borrows a bulk buffer while reads fill its buffer and
// gives it back after a short read, or goes on with its own buffer when
// maxBulkBufs are out; the stream must come through intact either way.
// net.Pipe hands each Read at most one Write, so the write sizes below
// drive the switches deterministically.
func TestProxyCopySwitchesBuffers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lentOut int32 // bulk buffers already out when the copy starts
	}{
		{"bulk buffers free", 0},
		{"bulk buffers all out", maxBulkBufs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bulkOut.Add(tc.lentOut)
			defer bulkOut.Add(-tc.lentOut)
			var want []byte
			writes := []int{1, copyBufSize, 3 * bulkBufSize, 10, bulkBufSize + 7, copyBufSize - 1, 5 * copyBufSize, 1}
			for i, n := range writes {
				want = append(want, bytes.Repeat([]byte{byte('a' + i)}, n)...)
			}
			srcIn, srcOut := net.Pipe()
			dstIn, dstOut := net.Pipe()
			go func() {
				off := 0
				for _, n := range writes {
					if _, err := srcIn.Write(want[off : off+n]); err != nil {
						return
					}
					off += n
				}
				_ = srcIn.Close()
			}()
			copied := make(chan int64, 1)
			go func() { copied <- proxyCopy(dstIn, srcOut, time.Minute) }()
			got, err := io.ReadAll(dstOut)
			if err != nil {
				t.Fatal(err)
			}
			if n := <-copied; n != int64(len(want)) {
				t.Errorf("proxyCopy returned %d; want %d", n, len(want))
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && i < len(want) && got[i] == want[i] {
					i++
				}
				t.Errorf("got %d bytes, first difference at %d; want %d bytes", len(got), i, len(want))
			}
			if out := bulkOut.Load(); out != tc.lentOut {
				t.Errorf("bulk buffers out after the copy: %d; want %d", out, tc.lentOut)
			}
		})
	}
}
