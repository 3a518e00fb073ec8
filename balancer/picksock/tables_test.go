package picksock

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// tableClient is a Go client of a real Server over a unix socket.
type tableClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialServer(t *testing.T, reg *balancer.Registry) *tableClient {
	t.Helper()
	srv := NewServer(Config{Picker: reg})
	path := filepath.Join(t.TempDir(), "pick.sock")
	ln, err := srv.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		_ = srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return &tableClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (tc *tableClient) send(b []byte) {
	tc.t.Helper()
	if _, err := tc.c.Write(b); err != nil {
		tc.t.Fatal(err)
	}
}

func (tc *tableClient) read() []byte {
	tc.t.Helper()
	_ = tc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(tc.br, hdr[:]); err != nil {
		tc.t.Fatal(err)
	}
	n, err := FrameLen(hdr[:])
	if err != nil {
		tc.t.Fatal(err)
	}
	f := make([]byte, n)
	copy(f, hdr[:])
	if _, err := io.ReadFull(tc.br, f[4:]); err != nil {
		tc.t.Fatal(err)
	}
	return f
}

func syncJSON(t *testing.T, reg *balancer.Registry, js string) {
	t.Helper()
	bs, err := balancer.DecodeBackends([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Sync(bs); err != nil {
		t.Fatal(err)
	}
}

func endpointsJSON(n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"address":"10.0.%d.%d","port":"8080"}`, i/250, i%250+1)
	}
	return sb.String()
}

// TestHashTableEqualsPick fetches a chash backend's table in chunks (100 peers:
// 16000 points, more than one frame) and checks that looking a key up in it
// gives Registry.Pick's peer for every attempt, for composite keys with
// unset variables too.
func TestHashTableEqualsPick(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	syncJSON(t, reg, `[{"name":"h","port":80,"upstreamHashByConfig":{"upstream-hash-by":"$host-$request_uri$arg_x"},"endpoints":[`+endpointsJSON(100)+`]},
	 {"name":"rr","port":80,"endpoints":[`+endpointsJSON(3)+`]}]`)
	tc := dialServer(t, reg)

	tc.send(AppendNeedVars(nil, 1, "h"))
	_, info, err := DecodeVarsReply(tc.read())
	if err != nil || !info.HashTable || info.Premade || !info.Tables || len(info.Peers) != 100 {
		t.Fatalf("info %+v err %v", info, err)
	}
	var hashes []uint32
	var owners []uint16
	var key []balancer.KeyPart
	chunks := 0
	for {
		tc.send(AppendTable(nil, 2, "h", uint32(len(hashes))))
		id, ch, err := DecodeTableReply(tc.read())
		if err != nil || id != 2 || ch.Code != CodeOK || ch.NPeers != 100 || ch.Offset != uint32(len(hashes)) || ch.Gen != info.Gen {
			t.Fatalf("chunk %d: %+v err %v", chunks, ch, err)
		}
		chunks++
		key = ch.Key
		hashes = append(hashes, ch.Hashes...)
		owners = append(owners, ch.Owners...)
		if uint32(len(hashes)) == ch.Total || len(ch.Hashes) == 0 {
			break
		}
	}
	if chunks < 2 || len(hashes) != 16000 {
		t.Fatalf("%d points in %d chunks; want 16000 in at least 2", len(hashes), chunks)
	}
	want := []balancer.KeyPart{{Var: "host"}, {Lit: "-"}, {Var: "request_uri"}, {Var: "arg_x"}}
	if fmt.Sprint(key) != fmt.Sprint(want) {
		t.Fatalf("key %+v; want %+v", key, want)
	}
	lookup := func(vars map[string]string) string {
		var k []byte
		for _, p := range key {
			if p.Var == "" {
				k = append(k, p.Lit...)
			} else if v, ok := vars[p.Var]; ok {
				k = append(k, v...)
			}
		}
		h := crc32.ChecksumIEEE(k)
		lo, hi := 0, len(hashes)
		for lo < hi {
			m := (lo + hi) / 2
			if hashes[m] < h {
				lo = m + 1
			} else {
				hi = m
			}
		}
		if lo == len(hashes) {
			lo = 0
		}
		return info.Peers[owners[lo]]
	}
	for i := range 2000 {
		vars := map[string]string{"host": "a.example", "request_uri": fmt.Sprintf("/p/%d", i)}
		if i%3 == 0 {
			vars["arg_x"] = fmt.Sprint(i * 7)
		}
		var a balancer.Attempt
		req := balancer.VarsFunc(func(n string) ([]byte, bool) {
			v, ok := vars[n]
			return []byte(v), ok
		})
		got := lookup(vars)
		for try := range 3 {
			p, err := reg.Pick("h", req, &a)
			if err != nil || p.Peer != got {
				t.Fatalf("%v attempt %d: table says %s, Pick %s (%v)", vars, try, got, p.Peer, err)
			}
			a.LastFailure = balancer.FailureFailed
		}
	}

	// Other algorithms have no table; unknown backends are unknown.
	tc.send(AppendTable(nil, 3, "rr", 0))
	if _, ch, err := DecodeTableReply(tc.read()); err != nil || ch.Code != CodeNoTable {
		t.Fatalf("rr table: %+v %v", ch, err)
	}
	tc.send(AppendTable(nil, 4, "nope", 0))
	if _, ch, err := DecodeTableReply(tc.read()); err != nil || ch.Code != CodeUnknownBackend {
		t.Fatalf("unknown table: %+v %v", ch, err)
	}
}

// TestPremadePicks: an ewma backend's premade picks are distinct candidates of
// its peers; a canary by weight 30 sends about 30 % of premade picks to the
// alternative; round robin with a canary gets routing decisions; a chash
// backend has none.
func TestPremadePicks(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	syncJSON(t, reg, `[
	 {"name":"e","port":80,"load-balance":"ewma","endpoints":[`+endpointsJSON(4)+`]},
	 {"name":"main","port":80,"load-balance":"ewma","alternativeBackends":["canary"],"endpoints":[{"address":"10.1.0.1","port":"80"},{"address":"10.1.0.2","port":"80"}]},
	 {"name":"canary","port":80,"load-balance":"ewma","noServer":true,"trafficShapingPolicy":{"weight":30,"header":"X-Canary"},"endpoints":[{"address":"10.2.0.1","port":"80"}]},
	 {"name":"rrmain","port":80,"alternativeBackends":["canary"],"endpoints":[{"address":"10.1.0.1","port":"80"},{"address":"10.1.0.2","port":"80"}]},
	 {"name":"h","port":80,"upstreamHashByConfig":{"upstream-hash-by":"$request_uri"},"endpoints":[`+endpointsJSON(3)+`]}]`)
	tc := dialServer(t, reg)

	tc.send(AppendNeedVars(nil, 1, "main"))
	_, info, err := DecodeVarsReply(tc.read())
	if err != nil || !info.Premade || info.HashTable || len(info.Vars) != 1 || info.Vars[0] != "http_x_canary" {
		t.Fatalf("main info %+v %v", info, err)
	}

	tc.send(AppendPremade(nil, 5, "e", 200))
	id, code, gen, picks, err := DecodePremadeReply(tc.read())
	if err != nil || id != 5 || code != CodeOK || gen != uint32(reg.Version()) || len(picks) != 200 {
		t.Fatalf("ewma premade: id %d code %d gen %d, %d picks, %v", id, code, gen, len(picks), err)
	}
	seen := map[string]int{}
	for _, p := range picks {
		if p.Backend != "e" || p.Alternative || len(p.Candidates) != 3 || p.EWMAScore < 0 {
			t.Fatalf("ewma pick %+v", p)
		}
		if p.Candidates[0] == p.Candidates[1] || p.Candidates[1] == p.Candidates[2] || p.Candidates[0] == p.Candidates[2] {
			t.Fatalf("ewma retries repeat a peer: %v", p.Candidates)
		}
		seen[p.Candidates[0]]++
	}
	if len(seen) < 3 {
		t.Fatalf("200 ewma picks over 4 idle peers chose %v", seen)
	}

	alt := 0
	const n = 4000
	for made := 0; made < n; {
		tc.send(AppendPremade(nil, 6, "main", 1000))
		_, code, _, picks, err := DecodePremadeReply(tc.read())
		if err != nil || code != CodeOK || len(picks) == 0 {
			t.Fatalf("canary premade: code %d, %d picks, %v", code, len(picks), err)
		}
		for _, p := range picks {
			if p.Alternative != (p.Backend == "canary") {
				t.Fatalf("canary pick %+v", p)
			}
			if p.Alternative {
				alt++
			}
		}
		made += len(picks)
	}
	// 30 % of 4000: 1200, standard deviation 29; 6 sigma either way.
	if alt < 1200-175 || alt > 1200+175 {
		t.Fatalf("%d of %d premade picks went to the 30 %% canary", alt, n)
	}

	// Round robin with a canary: its premade picks are routing decisions
	// only (Own) when they go to the round-robin main, whose peers then
	// come from a lease of its own rotation; making them takes no position
	// of that rotation. Those routed to the ewma canary carry candidates.
	tc.send(AppendNeedVars(nil, 8, "rrmain"))
	if _, info, err := DecodeVarsReply(tc.read()); err != nil || !info.Premade || info.Leasable {
		t.Fatalf("round robin with a canary: %+v %v", info, err)
	}
	start1, n1, err := reg.Lease("rrmain", 10)
	if err != nil || n1 != 2 {
		t.Fatalf("lease of a round-robin main with a canary: %d peers, %v", n1, err)
	}
	own, alt := 0, 0
	for made := 0; made < n; {
		tc.send(AppendPremade(nil, 9, "rrmain", 1000))
		_, code, _, picks, err := DecodePremadeReply(tc.read())
		if err != nil || code != CodeOK || len(picks) == 0 {
			t.Fatalf("round robin canary premade: code %d, %d picks, %v", code, len(picks), err)
		}
		for _, p := range picks {
			switch {
			case p.Own && p.Backend == "rrmain" && !p.Alternative && len(p.Candidates) == 0:
				own++
			case !p.Own && p.Backend == "canary" && p.Alternative && len(p.Candidates) > 0 && p.Candidates[0] == "10.2.0.1:80":
				alt++
			default:
				t.Fatalf("round robin canary pick %+v", p)
			}
		}
		made += len(picks)
	}
	if alt < 1200-175 || alt > 1200+175 || own+alt != n {
		t.Fatalf("%d of %d premade picks went to the 30 %% canary, %d to the main", alt, n, own)
	}
	if start2, _, _ := reg.Lease("rrmain", 10); start2 != start1+10 {
		t.Fatalf("the premade picks took positions of the main's rotation: lease at %d after %d+10", start2, start1)
	}

	tc.send(AppendPremade(nil, 7, "h", 10))
	if _, code, _, picks, err := DecodePremadeReply(tc.read()); err != nil || code != CodeNoTable || len(picks) != 0 {
		t.Fatalf("chash premade: code %d picks %d %v", code, len(picks), err)
	}
}

// TestSubscribePushesGenerations: a subscribed connection gets the current
// generation at once and every new one without asking.
func TestSubscribePushesGenerations(t *testing.T) {
	reg := newRegistry(t)
	tc := dialServer(t, reg)
	tc.send(AppendSubscribe(nil))
	gen, err := DecodeGen(tc.read())
	if err != nil || gen != uint32(reg.Version()) {
		t.Fatalf("first push %d %v; want %d", gen, err, reg.Version())
	}
	for i := range 3 {
		// Each payload differs from the last (an equal one changes
		// nothing, not even the generation).
		syncJSON(t, reg, strings.ReplaceAll(payload, `"8080"`, fmt.Sprintf(`"%d"`, 9000+i)))
		gen, err = DecodeGen(tc.read())
		if err != nil || gen != uint32(reg.Version()) {
			t.Fatalf("push %d %v; want %d", gen, err, reg.Version())
		}
	}
	// Replies still come through between pushes.
	tc.send(AppendNeedVars(nil, 9, "default-web-80"))
	if id, info, err := DecodeVarsReply(tc.read()); err != nil || id != 9 || info.Gen != uint32(reg.Version()) {
		t.Fatalf("info after pushes: %d %+v %v", id, info, err)
	}
}

// TestStickyTablesEqualPick: a returning session's peer read off a sticky
// table (the ring of sticky_balanced, the peer keys of sticky_persistent) is
// Registry.Pick's for every attempt, with no new cookie; a key the table does
// not know is a new session (which the shim asks Go about). change-on-failure backends have no
// table (their retries choose anew).
func TestStickyTablesEqualPick(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	affinity := func(mode string, change bool) string {
		return fmt.Sprintf(`"sessionAffinityConfig":{"name":"cookie","mode":%q,"cookieSessionAffinity":{"name":"sess","change_on_failure":%v}}`, mode, change)
	}
	syncJSON(t, reg, `[
	 {"name":"bal","port":80,`+affinity("balanced", false)+`,"endpoints":[`+endpointsJSON(7)+`]},
	 {"name":"per","port":80,`+affinity("persistent", false)+`,"endpoints":[`+endpointsJSON(7)+`]},
	 {"name":"chg","port":80,`+affinity("balanced", true)+`,"endpoints":[`+endpointsJSON(7)+`]}]`)
	tc := dialServer(t, reg)
	table := func(name string) (TableChunk, []string) {
		tc.send(AppendNeedVars(nil, 1, name))
		_, info, err := DecodeVarsReply(tc.read())
		if err != nil || !info.HashTable {
			t.Fatalf("%s info %+v %v", name, info, err)
		}
		tc.send(AppendTable(nil, 2, name, 0))
		_, ch, err := DecodeTableReply(tc.read())
		if err != nil || ch.Code != CodeOK || uint32(len(ch.Hashes)) != ch.Total || len(ch.Key) != 1 || ch.Key[0].Lit != "sess" {
			t.Fatalf("%s table %+v %v", name, ch, err)
		}
		return ch, info.Peers
	}
	pick := func(name, cookie string) (peers []string, setCookie string) {
		var a balancer.Attempt
		req := balancer.VarsFunc(func(n string) ([]byte, bool) {
			if n == "http_cookie" {
				return []byte(cookie), true
			}
			return nil, false
		})
		for range 3 {
			p, err := reg.Pick(name, req, &a)
			if err != nil {
				t.Fatal(err)
			}
			peers = append(peers, p.Peer)
			setCookie += p.SetCookie
			a.LastFailure = balancer.FailureFailed
		}
		return peers, setCookie
	}

	bal, peers := table("bal")
	if bal.Kind != balancer.TableSticky || len(bal.Hashes) != 7*160 {
		t.Fatalf("balanced table: kind %d, %d points", bal.Kind, len(bal.Hashes))
	}
	for i := range 500 {
		key := fmt.Sprintf("%d.%d.%d", 1700000000+i, 42, i*31)
		h := crc32.ChecksumIEEE([]byte(key))
		j := 0
		for j < len(bal.Hashes) && bal.Hashes[j] < h {
			j++
		}
		if j == len(bal.Hashes) {
			j = 0
		}
		want := peers[bal.Owners[j]]
		got, set := pick("bal", "a=b; sess="+key+"|"+balancer.BackendKey("bal")+"; c=d")
		if got[0] != want || got[1] != want || got[2] != want || set != "" {
			t.Fatalf("cookie key %s: Pick %v (Set-Cookie %q); table %s", key, got, set, want)
		}
	}

	per, peers := table("per")
	if per.Kind != balancer.TableStickyPersistent || len(per.Hashes) != 0 || len(per.PeerKeys) != 7 {
		t.Fatalf("persistent table %+v", per)
	}
	for i, k := range per.PeerKeys {
		got, set := pick("per", "sess="+k)
		if got[0] != peers[i] || got[2] != peers[i] || set != "" {
			t.Fatalf("persistent key of %s: Pick %v (Set-Cookie %q)", peers[i], got, set)
		}
	}

	// change-on-failure: the table decides first attempts, and says that
	// retries are new sessions'.
	chg, _ := table("chg")
	if chg.Recipe == nil || !chg.Recipe.ChangeOnFailure {
		t.Fatalf("change-on-failure table recipe %+v", chg.Recipe)
	}
}

// TestSubsetTable: a chashsubset backend's table names, for every key, the
// subset Registry.Pick draws its peers from.
func TestSubsetTable(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	syncJSON(t, reg, `[{"name":"sub","port":80,"upstreamHashByConfig":{"upstream-hash-by":"$request_uri","upstream-hash-by-subset":true,"upstream-hash-by-subset-size":3},"endpoints":[`+endpointsJSON(8)+`]}]`)
	tc := dialServer(t, reg)
	tc.send(AppendNeedVars(nil, 1, "sub"))
	_, info, err := DecodeVarsReply(tc.read())
	if err != nil || !info.HashTable {
		t.Fatalf("info %+v %v", info, err)
	}
	tc.send(AppendTable(nil, 2, "sub", 0))
	_, ch, err := DecodeTableReply(tc.read())
	// 8 endpoints in subsets of 3: 3 subsets, the last padded.
	if err != nil || ch.Code != CodeOK || ch.Kind != balancer.TableSubset || len(ch.Subsets) != 3 || len(ch.Hashes) != 3*160 || uint32(len(ch.Hashes)) != ch.Total {
		t.Fatalf("table %+v %v", ch, err)
	}
	for i := range 200 {
		uri := fmt.Sprintf("/s/%d", i)
		h := crc32.ChecksumIEEE([]byte(uri))
		j := 0
		for j < len(ch.Hashes) && ch.Hashes[j] < h {
			j++
		}
		if j == len(ch.Hashes) {
			j = 0
		}
		set := ch.Subsets[ch.Owners[j]]
		counts := map[string]int{}
		for range 300 {
			var a balancer.Attempt
			p, err := reg.Pick("sub", balancer.VarsFunc(func(n string) ([]byte, bool) { return []byte(uri), n == "request_uri" }), &a)
			if err != nil {
				t.Fatal(err)
			}
			counts[p.Peer]++
		}
		for _, m := range set {
			delete(counts, info.Peers[m])
		}
		if len(counts) > 0 {
			t.Fatalf("%s: Pick chose %v outside the table's subset %v", uri, counts, set)
		}
	}
}

// TestStickyNewSessionsPremade: premade new sessions of a sticky backend carry
// an upstream key per candidate, which the backend's own table maps back to
// that candidate (so the returning session reaches it), distinct peers per
// attempt; the table carries the cookie recipe.
func TestStickyNewSessionsPremade(t *testing.T) {
	reg := balancer.NewRegistry(balancer.Config{})
	aff := func(mode string) string {
		return fmt.Sprintf(`"sessionAffinityConfig":{"name":"cookie","mode":%q,"cookieSessionAffinity":{"name":"sess","expires":"3600","maxage":"60","path":"/app","samesite":"None","conditional_samesite_none":true,"locations":{"a.example":["/app"],"*.b.example":["/","/x"]}}}`, mode)
	}
	syncJSON(t, reg, `[{"name":"bal","port":80,`+aff("balanced")+`,"endpoints":[`+endpointsJSON(5)+`]},
	 {"name":"per","port":80,`+aff("persistent")+`,"endpoints":[`+endpointsJSON(5)+`]}]`)
	tc := dialServer(t, reg)
	for _, name := range []string{"bal", "per"} {
		tc.send(AppendNeedVars(nil, 1, name))
		_, info, err := DecodeVarsReply(tc.read())
		if err != nil || !info.Premade || !info.HashTable {
			t.Fatalf("%s info %+v %v", name, info, err)
		}
		tc.send(AppendTable(nil, 2, name, 0))
		_, ch, err := DecodeTableReply(tc.read())
		if err != nil || ch.Code != CodeOK || ch.Recipe == nil {
			t.Fatalf("%s table %+v %v", name, ch, err)
		}
		want := balancer.CookieRecipe{Name: "sess", BackendKey: balancer.BackendKey(name), HasExpires: true, Expires: 3600, MaxAge: "60",
			Path: "/app", SameSite: "None", ConditionalNone: true, Locations: map[string][]string{"a.example": {"/app"}, "*.b.example": {"/", "/x"}}}
		if got := *ch.Recipe; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s recipe\n got %+v\nwant %+v", name, got, want)
		}
		owner := func(key string) string {
			if ch.Kind == balancer.TableStickyPersistent {
				for i, k := range ch.PeerKeys {
					if k == key {
						return info.Peers[i]
					}
				}
				return ""
			}
			h := crc32.ChecksumIEEE([]byte(key))
			j := 0
			for j < len(ch.Hashes) && ch.Hashes[j] < h {
				j++
			}
			if j == len(ch.Hashes) {
				j = 0
			}
			return info.Peers[ch.Owners[j]]
		}
		tc.send(AppendPremade(nil, 3, name, 100))
		_, code, _, picks, err := DecodePremadeReply(tc.read())
		if err != nil || code != CodeOK || len(picks) != 100 {
			t.Fatalf("%s premade: code %d, %d picks, %v", name, code, len(picks), err)
		}
		first := map[string]int{}
		for _, p := range picks {
			if len(p.Keys) != 3 || len(p.Candidates) != 3 || p.Candidates[0] == p.Candidates[1] || p.Candidates[1] == p.Candidates[2] {
				t.Fatalf("%s new session %+v", name, p)
			}
			for i, k := range p.Keys {
				if owner(k) != p.Candidates[i] {
					t.Fatalf("%s: key %q of candidate %s leads to %s", name, k, p.Candidates[i], owner(k))
				}
			}
			first[p.Candidates[0]]++
		}
		if len(first) < 4 {
			t.Errorf("%s: 100 new sessions started on %v", name, first)
		}
	}
}

// TestStalledFrameIsClosed: a connection that stops mid-frame is closed after
// FrameTimeout, while an idle one (no partial frame) stays open and served.
func TestStalledFrameIsClosed(t *testing.T) {
	srv := NewServer(Config{Picker: newRegistry(t), FrameTimeout: 200 * time.Millisecond})
	path := filepath.Join(t.TempDir(), "pick.sock")
	ln, err := srv.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		_ = srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	stalled, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	idle, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	frame := AppendNeedVars(nil, 1, "default-web-80")
	if _, err := stalled.Write(frame[:len(frame)-3]); err != nil { // all but the last bytes
		t.Fatal(err)
	}
	_ = stalled.SetReadDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	if n, err := stalled.Read(make([]byte, 64)); err == nil || n > 0 {
		t.Fatalf("a connection stalled mid-frame got %d bytes, %v; want it closed", n, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("closed after %v; want about the 200 ms frame timeout", d)
	}
	time.Sleep(300 * time.Millisecond) // idle longer than the frame timeout
	if _, err := idle.Write(frame); err != nil {
		t.Fatal(err)
	}
	tc := &tableClient{t: t, c: idle, br: bufio.NewReader(idle)}
	if _, info, err := DecodeVarsReply(tc.read()); err != nil || info.Code != CodeOK {
		t.Fatalf("idle connection's reply: %+v %v", info, err)
	}
}
