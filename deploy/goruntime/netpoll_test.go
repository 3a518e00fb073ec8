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
// runs each three times: without it the runtime's poller must run a batch
// last-reported first (if a Go release changed that, the overlay would
// reverse it back and must go), with it first-reported first. Two runs of
// three must show the order: on a busy machine the runtime's monitor may
// poll in the middle of the writes (its 10 ms without a poll), which
// splits the batch in two and mixes the halves.
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
	descending := func(order []int) bool {
		r := slices.Clone(order)
		slices.Reverse(r)
		return slices.IsSorted(r)
	}
	var stock, inOrder int
	var stockOrders, patchedOrders [][]int
	for range 3 {
		got := runOrder(t, plain)
		stockOrders = append(stockOrders, got)
		if descending(got) {
			stock++
		}
		got = runOrder(t, patched)
		patchedOrders = append(patchedOrders, got)
		if slices.IsSorted(got) {
			inOrder++
		}
	}
	if stock < 2 {
		t.Errorf("the stock runtime ran the readers last-reported first in %d of 3 runs (%v): the overlay would no longer put them in order (see netpoll-fifo.sh)", stock, stockOrders)
	}
	if inOrder < 2 {
		t.Errorf("with the overlay the readers ran in the order the bytes came in %d of 3 runs (%v)", inOrder, patchedOrders)
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
