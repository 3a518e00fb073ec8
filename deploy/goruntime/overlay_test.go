// Package goruntime_test checks deploy/goruntime/overlay.sh, the overlay
// the release build applies to the Go runtime, against the installed
// toolchain: each change it makes applies, and does what it is for.
package goruntime_test

import (
	"context"
	"encoding/json"
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
	overlay := writeOverlay(t, dir)
	plain := buildProgram(t, dir, "plain", "./testdata/order")
	patched := buildProgram(t, dir, "patched", "./testdata/order", "-overlay="+overlay)
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
		t.Errorf("the stock runtime ran the readers last-reported first in %d of 3 runs (%v): the overlay would no longer put them in order (see overlay.sh)", stock, stockOrders)
	}
	if inOrder < 2 {
		t.Errorf("with the overlay the readers ran in the order the bytes came in %d of 3 runs (%v)", inOrder, patchedOrders)
	}
}

// writeOverlay runs overlay.sh into dir and returns its overlay file,
// failing unless both changes applied.
func writeOverlay(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("./overlay.sh", filepath.Join(dir, "overlay"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("overlay.sh: %v", err)
	}
	overlay := strings.TrimSpace(string(out))
	if overlay == "" {
		t.Fatal("overlay.sh wrote no overlay for this Go: its runtime no longer takes the changes; see the script")
	}
	patch, err := os.ReadFile(filepath.Join(dir, "overlay", "runtime_patch_overlay.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patch), `runtimePatch = "netpoll-fifo+idle-spin"`) {
		t.Fatalf("overlay.sh applied only some changes to this Go's runtime (its messages above say why):\n%s", patch)
	}
	return overlay
}

// buildProgram builds pkg into dir/name with the extra go build args.
func buildProgram(t *testing.T, dir, name, pkg string, args ...string) string {
	t.Helper()
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, args...), pkg)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go build %s: %v", name, err)
	}
	return bin
}

func runOrder(t *testing.T, bin string) []int {
	t.Helper()
	nums, _ := runNumbers(t, bin)
	if len(nums) != 16 {
		t.Fatalf("%s printed %d readers; want 16", bin, len(nums))
	}
	order := make([]int, len(nums))
	for i, n := range nums {
		order[i] = int(n)
	}
	return order
}

// runNumbers runs bin with args (within a minute) and returns the numbers
// it printed, or none when it printed "none".
func runNumbers(t *testing.T, bin string, args ...string) (nums []int64, none bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", bin, args, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 1 && f[0] == "none" {
		return nil, true
	}
	for _, w := range f {
		n, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			t.Fatalf("%s %v printed %q", bin, args, out)
		}
		nums = append(nums, n)
	}
	return nums, false
}

// TestIdleSpin builds testdata/idlespin with the overlay (and a file that
// reaches the runtime's idle spin, as cmd/switchyard's does) and without,
// and checks what the spin does: a thread that runs out of work while
// another P runs finds the next ready connection while it spins; nothing
// spins with the window at 0, or when the other P is reserved (an event
// loop's); a process with nothing to do stops spinning a window after its
// last work; and the share bounds the time spent spinning.
func TestIdleSpin(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the overlay is built for Linux")
	}
	dir := t.TempDir()
	overlay := writeOverlay(t, dir)
	hook := filepath.Join(dir, "hook.go")
	if err := os.WriteFile(hook, []byte(`package main

import _ "unsafe"

func init() {
	setSpin = runtimeSetIdleSpin
	spinStats = runtimeIdleSpinStats
	spinReserve = runtimeIdleSpinReserve
}

//go:linkname runtimeSetIdleSpin runtime.switchyardSetIdleSpin
func runtimeSetIdleSpin(window, share int64)

//go:linkname runtimeIdleSpinStats runtime.switchyardIdleSpinStats
func runtimeIdleSpinStats() (spins, found, spentNS int64)

//go:linkname runtimeIdleSpinReserve runtime.switchyardIdleSpinReserve
func runtimeIdleSpinReserve(delta int64)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var ov struct{ Replace map[string]string }
	raw, err := os.ReadFile(overlay)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ov); err != nil {
		t.Fatal(err)
	}
	here, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ov.Replace[filepath.Join(here, "testdata", "idlespin", "hook_overlay.go")] = hook
	raw, err = json.Marshal(ov)
	if err != nil {
		t.Fatal(err)
	}
	withHook := filepath.Join(dir, "overlay-hook.json")
	if err := os.WriteFile(withHook, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	plain := buildProgram(t, dir, "plain", "./testdata/idlespin")
	patched := buildProgram(t, dir, "patched", "./testdata/idlespin", "-overlay="+withHook)

	if out := runIdleSpin(t, plain, "busy", 0, 100, 10); out != nil {
		t.Errorf("without the overlay the program reached an idle spin: %v", out)
	}
	const n = 1000
	const window = int64(time.Millisecond)
	// A window long enough for a byte 30µs away on a loaded machine,
	// where the writer may wait for a CPU (the runtime takes any window).
	st := runIdleSpin(t, patched, "busy", 20*window, 100, n)
	if st.found < n/2 {
		t.Errorf("busy, window 20ms: %d of %d waits for a byte 30µs away found it while spinning (%+v); want at least half", st.found, n, st)
	}
	if st = runIdleSpin(t, patched, "busy", 0, 100, n); st.spins != 0 {
		t.Errorf("busy, window 0: %d spins; want none", st.spins)
	}
	// The writer's P, reported as an event loop's, is no work in flight.
	if st = runIdleSpin(t, patched, "busy", window, 100, n, "1"); st.spins > n/20 {
		t.Errorf("busy, window 1ms, the writer's P reserved: %d spins; want hardly any", st.spins)
	}
	// Each 5 ms sleep ends in a wake-up that may set both Ps spinning
	// (the runtime starts a second thread for the goroutine the timer
	// readies); neither may spin longer than a window after that.
	if st = runIdleSpin(t, patched, "alone", window, 100, 50); st.spentNS > 50*2*window+2*window {
		t.Errorf("alone, window 1ms: spun %v in 50 sleeps of 5ms; want at most two windows a sleep (%+v)", time.Duration(st.spentNS), st)
	}
	// At a share of 1 %, two Ps spin for at most 2 ms in each 100 ms,
	// plus the window each may overrun by; unbounded, the busy exercise
	// spins for most of its time.
	st = runIdleSpin(t, patched, "busy", window, 1, n)
	if limit := (st.took/int64(100*time.Millisecond)+1)*int64(2*time.Millisecond) + 2*window; st.spentNS > limit {
		t.Errorf("busy, share 1%%: spun %v in %v; want at most %v", time.Duration(st.spentNS), time.Duration(st.took), time.Duration(limit))
	}
}

type spinStats struct{ spins, found, spentNS, took int64 }

// runIdleSpin runs testdata/idlespin's bin and returns its counters, or
// nil when it was built without the idle spin.
func runIdleSpin(t *testing.T, bin, mode string, window, share int64, n int, reserved ...string) *spinStats {
	t.Helper()
	args := append([]string{mode, strconv.FormatInt(window, 10), strconv.FormatInt(share, 10), strconv.Itoa(n)}, reserved...)
	v, none := runNumbers(t, bin, args...)
	if none {
		return nil
	}
	if len(v) != 4 {
		t.Fatalf("%s %v printed %d numbers; want 4", bin, args, len(v))
	}
	st := &spinStats{spins: v[0], found: v[1], spentNS: v[2], took: v[3]}
	t.Logf("%s %v window %v share %d%% n %d: %d spins, %d found work, spun %v in %v", mode, reserved, time.Duration(window), share, n, st.spins, st.found, time.Duration(st.spentNS), time.Duration(st.took))
	return st
}
