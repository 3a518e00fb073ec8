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
		"-front", "one=" + a + "@" + pid, "-front", "two=" + b + "@" + pid}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var rows, pooled int
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(line)
		if f[0] == "#" {
			pooled++
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
	if rows != 4 || pooled != 2 {
		t.Errorf("%d rows and %d pooled lines, want 4 and 2:\n%s", rows, pooled, out.String())
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
	if err := turnsMain(append(args, "-front", fmt.Sprintf("a=%s@%s", ok, pid)), io.Discard); err == nil {
		t.Error("one front was taken")
	}
}
