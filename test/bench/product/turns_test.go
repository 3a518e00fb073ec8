package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
)

func turnsServer(t *testing.T, status int) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != "bench.local" {
			w.WriteHeader(http.StatusMisdirectedRequest)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// turns prints product.sh's rows, one per round and proxy, and the pooled
// quantiles per proxy.
func TestTurnsRows(t *testing.T) {
	a, b := turnsServer(t, 200), turnsServer(t, 200)
	pid := strconv.Itoa(os.Getpid())
	var out bytes.Buffer
	err := turnsMain([]string{"-label", "cell", "-conns", "2", "-slice", "10ms", "-round", "30ms", "-rounds", "2", "-warmup", "10ms",
		"-front", "one=" + a + "@" + pid, "-front", "two=" + b + "@" + pid, "-shared", "self=" + pid}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var rows, pooled, shared int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 8 && f[1] == "shared" && f[2] == "cell":
			// # shared cell ROUND NAME load self idle: CPU per request
			// (µs) and the machine's idle share (%).
			shared++
			for _, v := range f[5:] {
				if us, err := strconv.ParseFloat(v, 64); err != nil || us < 0 {
					t.Errorf("shared line %q: %q", line, v)
				}
			}
			continue
		case f[0] == "#" && strings.Contains(line, "pooled"):
			pooled++
			continue
		case f[0] == "#":
			continue
		}
		rows++
		if len(f) != 9 || f[0] != "cell" || (f[2] != "one" && f[2] != "two") || f[7] != "0" || f[8] != "-" {
			t.Errorf("row %q: want cell ROUND one|two rps p99 cpu cpu%% 0 -", line)
			continue
		}
		if rps, err := strconv.ParseFloat(f[3], 64); err != nil || rps <= 0 {
			t.Errorf("row %q: rps %q", line, f[3])
		}
	}
	if rows != 4 || pooled != 2 || shared != 4 {
		t.Errorf("%d rows, %d pooled lines and %d shared lines, want 4, 2 and 4:\n%s", rows, pooled, shared, out.String())
	}
}

// A proxy that answers other than 200 fails the run; a -front without a
// process is refused.
func TestTurnsFailures(t *testing.T) {
	ok, bad := turnsServer(t, 200), turnsServer(t, 502)
	pid := strconv.Itoa(os.Getpid())
	args := []string{"-conns", "1", "-slice", "10ms", "-round", "10ms", "-rounds", "1", "-warmup", "0s"}
	err := turnsMain(append(args, "-front", "a="+ok+"@"+pid, "-front", "b="+bad+"@"+pid), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "answered 502") {
		t.Errorf("a 502 front: error %v", err)
	}
	for _, f := range []string{"a=" + ok, "a=" + ok + "@x", "=" + ok + "@" + pid, "a=@1"} {
		if err := turnsMain(append(args, "-front", f, "-front", "b="+ok+"@"+pid), io.Discard); err == nil {
			t.Errorf("-front %q was taken", f)
		}
	}
	for _, sh := range []string{"x", "x=", "=1", "x=-3"} {
		if err := turnsMain(append(args, "-front", "a="+ok+"@"+pid, "-front", "b="+ok+"@"+pid, "-shared", sh), io.Discard); err == nil {
			t.Errorf("-shared %q was taken", sh)
		}
	}
	if err := turnsMain(append(args, "-front", fmt.Sprintf("a=%s@%s", ok, pid)), io.Discard); err == nil {
		t.Error("one front was taken")
	}
}
