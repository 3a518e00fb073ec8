// Package goruntime_test checks deploy/goruntime/netpoll-fifo.sh, the
// overlay the release build applies to the Go runtime, against the
// installed toolchain.
package goruntime_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestNetpollOrder builds testdata/order with and without the overlay and
// runs each a few times: without it the runtime's poller must run a batch
// last-reported first (if a Go release changed that, the overlay would
// reverse it back and must go), with it first-reported first.
func TestNetpollOrder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the overlay patches the epoll poller, Linux's")
	}
	dir := t.TempDir()
	out, err := exec.Command("./netpoll-fifo.sh", filepath.Join(dir, "overlay")).Output()
	if err != nil {
		t.Fatalf("netpoll-fifo.sh: %v", err)
	}
	overlay := strings.TrimSpace(string(out))
	if overlay == "" {
		t.Fatal("netpoll-fifo.sh wrote no overlay for this Go: its runtime no longer has the line it changes; see the script")
	}
	build := func(name string, args ...string) string {
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), "./testdata/order")...)
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go build %s: %v", name, err)
		}
		return bin
	}
	plain := build("plain")
	patched := build("patched", "-overlay="+overlay)
	ascending := func(order []int) bool { return slices.IsSorted(order) }
	descending := func(order []int) bool {
		r := slices.Clone(order)
		slices.Reverse(r)
		return slices.IsSorted(r)
	}
	for run := range 3 {
		if got := runOrder(t, plain); !descending(got) {
			t.Fatalf("run %d: the stock runtime ran the readers in the order %v, not last-reported first: the overlay would no longer put them in order (see netpoll-fifo.sh)", run, got)
		}
		if got := runOrder(t, patched); !ascending(got) {
			t.Fatalf("run %d: with the overlay the readers ran in the order %v; want the order the bytes came", run, got)
		}
	}
}

func runOrder(t *testing.T, bin string) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	var order []int
	for _, f := range strings.Fields(string(out)) {
		i, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s printed %q", bin, out)
		}
		order = append(order, i)
	}
	if len(order) != 16 {
		t.Fatalf("%s printed %d readers; want 16", bin, len(order))
	}
	return order
}
