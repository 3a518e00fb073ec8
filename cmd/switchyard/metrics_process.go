package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// processCollector exports ingress-nginx's nginx_process_* metrics of a
// group of processes read from /proc: with --data-plane=nginx the nginx
// master and its workers, with --data-plane=go this process (which serves
// the requests there).
type processCollector struct {
	// pids lists the processes at scrape time.
	pids func() []int
}

const processNS = ingressNS + "_nginx_process"

var (
	descProcNum      = prometheus.NewDesc(processNS+"_num_procs", "number of processes", nil, nil)
	descProcCPU      = prometheus.NewDesc(processNS+"_cpu_seconds_total", "Cpu usage in seconds", nil, nil)
	descProcRead     = prometheus.NewDesc(processNS+"_read_bytes_total", "number of bytes read", nil, nil)
	descProcWrite    = prometheus.NewDesc(processNS+"_write_bytes_total", "number of bytes written", nil, nil)
	descProcResident = prometheus.NewDesc(processNS+"_resident_memory_bytes", "number of bytes of memory in use", nil, nil)
	descProcVirtual  = prometheus.NewDesc(processNS+"_virtual_memory_bytes", "number of bytes of memory in use", nil, nil)
	descProcStart    = prometheus.NewDesc(processNS+"_oldest_start_time_seconds", "start time in seconds since 1970/01/01", nil, nil)
)

func (processCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProcNum, descProcCPU, descProcRead, descProcWrite, descProcResident, descProcVirtual, descProcStart} {
		ch <- d
	}
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture Go supports).
const userHZ = 100

func (c processCollector) Collect(ch chan<- prometheus.Metric) {
	boot, err := bootTime()
	if err != nil {
		klog.V(2).InfoS("process metrics", "error", err)
		return
	}
	var n int
	var cpu, rss, vsize, read, write, oldest float64
	for _, pid := range c.pids() {
		st, err := readStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		n++
		cpu += float64(st.utime+st.stime) / userHZ
		rss += float64(st.rss * int64(os.Getpagesize()))
		vsize += float64(st.vsize)
		start := boot + float64(st.start)/userHZ
		if oldest == 0 || start < oldest {
			oldest = start
		}
		r, w := readIO(pid)
		read += float64(r)
		write += float64(w)
	}
	if n == 0 {
		return
	}
	ch <- prometheus.MustNewConstMetric(descProcNum, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(descProcCPU, prometheus.CounterValue, cpu)
	ch <- prometheus.MustNewConstMetric(descProcRead, prometheus.CounterValue, read)
	ch <- prometheus.MustNewConstMetric(descProcWrite, prometheus.CounterValue, write)
	ch <- prometheus.MustNewConstMetric(descProcResident, prometheus.GaugeValue, rss)
	ch <- prometheus.MustNewConstMetric(descProcVirtual, prometheus.GaugeValue, vsize)
	ch <- prometheus.MustNewConstMetric(descProcStart, prometheus.GaugeValue, oldest)
}

// procStat is what the process metrics read from /proc/<pid>/stat.
type procStat struct {
	ppid                int
	utime, stime, start int64 // clock ticks
	vsize, rss          int64 // bytes, pages
}

// readStat parses /proc/<pid>/stat (proc(5)). The command name in
// parentheses may hold spaces and parentheses: fields are counted from the
// last ')'.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	// f[0] is field 3 (state).
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 22 {
		return procStat{}, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(f))
	}
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	return procStat{ppid: int(num(1)), utime: num(11), stime: num(12), start: num(19), vsize: num(20), rss: num(21)}, nil
}

// readIO returns read_bytes and write_bytes of /proc/<pid>/io, or zeros
// when it cannot be read (another user's process without CAP_SYS_PTRACE).
func readIO(pid int) (read, write int64) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		switch k {
		case "read_bytes":
			read = n
		case "write_bytes":
			write = n
		}
	}
	return read, write
}

// bootTime is btime of /proc/stat: the boot time in Unix seconds, which
// process start times in clock ticks count from.
func bootTime() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "btime "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no btime in /proc/stat")
}

// selfPIDs is processCollector.pids for --data-plane=go.
func selfPIDs() []int { return []int{os.Getpid()} }

// nginxPIDs returns processCollector.pids for --data-plane=nginx: the master
// named by pidFile and its children (the workers, cache manager and loader).
func nginxPIDs(pidFile string) func() []int {
	return func() []int {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return nil
		}
		master, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || master <= 0 {
			return nil
		}
		if _, err := readStat(master); err != nil {
			return nil // a stale pid file
		}
		pids := []int{master}
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return pids
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == master {
				continue
			}
			if st, err := readStat(pid); err == nil && st.ppid == master {
				pids = append(pids, pid)
			}
		}
		return pids
	}
}

// stubStatusCollector exports ingress-nginx's connection and request
// counters of nginx (nginx_process_connections{state},
// nginx_process_connections_total{state}, nginx_process_requests_total),
// read from nginx's stub_status page on the local status server at scrape
// time.
type stubStatusCollector struct {
	url    string
	client *http.Client
}

var (
	descStubConns      = prometheus.NewDesc(processNS+"_connections", "current number of client connections with state {active, reading, writing, waiting}", []string{"state"}, nil)
	descStubConnsTotal = prometheus.NewDesc(processNS+"_connections_total", "total number of connections with state {accepted, handled}", []string{"state"}, nil)
	descStubRequests   = prometheus.NewDesc(processNS+"_requests_total", "total number of client requests", nil, nil)
)

func newStubStatusCollector(url string) stubStatusCollector {
	return stubStatusCollector{url: url, client: &http.Client{Timeout: 5 * time.Second}}
}

func (stubStatusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descStubConns
	ch <- descStubConnsTotal
	ch <- descStubRequests
}

func (c stubStatusCollector) Collect(ch chan<- prometheus.Metric) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, c.url, nil)
	if err != nil {
		return
	}
	resp, err := c.client.Do(req)
	if err != nil {
		klog.V(2).InfoS("nginx stub_status", "error", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil || resp.StatusCode != http.StatusOK {
		return
	}
	s, err := parseStubStatus(string(b))
	if err != nil {
		klog.V(2).InfoS("nginx stub_status", "error", err)
		return
	}
	for state, v := range map[string]int64{"active": s.active, "reading": s.reading, "writing": s.writing, "waiting": s.waiting} {
		ch <- prometheus.MustNewConstMetric(descStubConns, prometheus.GaugeValue, float64(v), state)
	}
	ch <- prometheus.MustNewConstMetric(descStubConnsTotal, prometheus.CounterValue, float64(s.accepted), "accepted")
	ch <- prometheus.MustNewConstMetric(descStubConnsTotal, prometheus.CounterValue, float64(s.handled), "handled")
	ch <- prometheus.MustNewConstMetric(descStubRequests, prometheus.CounterValue, float64(s.requests))
}

// stubStatus is nginx's stub_status page:
//
//	Active connections: 1
//	server accepts handled requests
//	 7 7 9
//	Reading: 0 Writing: 1 Waiting: 0
type stubStatus struct {
	active, accepted, handled, requests, reading, writing, waiting int64
}

func parseStubStatus(page string) (stubStatus, error) {
	var s stubStatus
	lines := strings.Split(strings.TrimSpace(page), "\n")
	if len(lines) != 4 {
		return s, fmt.Errorf("parse stub_status: %d lines", len(lines))
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(lines[0]), "Active connections: %d", &s.active); err != nil {
		return s, fmt.Errorf("parse stub_status: %w", err)
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(lines[2]), "%d %d %d", &s.accepted, &s.handled, &s.requests); err != nil {
		return s, fmt.Errorf("parse stub_status: %w", err)
	}
	if _, err := fmt.Sscanf(strings.TrimSpace(lines[3]), "Reading: %d Writing: %d Waiting: %d", &s.reading, &s.writing, &s.waiting); err != nil {
		return s, fmt.Errorf("parse stub_status: %w", err)
	}
	return s, nil
}
