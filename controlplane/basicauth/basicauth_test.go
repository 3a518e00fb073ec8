package basicauth

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-proxy/switchyard/test/harness"
)

// users.htpasswd's users; the password of each is "pw-<user>".
var users = []string{"md5", "apr1", "sha256", "sha512", "sha512rounds", "sha", "ssha", "plain", "bcrypt"}

func TestParseAndVerify(t *testing.T) {
	data, err := os.ReadFile("testdata/users.htpasswd")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if c.Users() != len(users) {
		t.Errorf("%d users; want %d", c.Users(), len(users))
	}
	for _, u := range users {
		if !c.Verify(u, "pw-"+u) {
			t.Errorf("%s: right password refused", u)
		}
		if c.Verify(u, "pw-"+u+"x") || c.Verify(u, "") {
			t.Errorf("%s: wrong password accepted", u)
		}
	}
	if c.Verify("md5", "second-line-ignored") || c.Verify("nobody", "pw-nobody") {
		t.Error("a later line of a user, or an unknown user, was accepted")
	}
	// The file written back holds the same credentials.
	again, err := Parse(c.File())
	if err != nil || again.Digest() != c.Digest() || !again.Verify("bcrypt", "pw-bcrypt") {
		t.Errorf("File() does not read back the same: %v", err)
	}
	b, _ := c.MarshalJSON()
	if strings.Contains(string(b), "$") || !strings.Contains(string(b), c.Digest()) {
		t.Errorf("JSON %s shows hashes or no digest", b)
	}
}

func TestParseRefuses(t *testing.T) {
	unsupported, err := os.ReadFile("testdata/unsupported.htpasswd")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{
		"yescrypt and DES":    string(unsupported),
		"no colon":            "alice\n",
		"empty user":          ":{PLAIN}x\n",
		"empty hash":          "alice:\n",
		"blank in the hash":   "alice:{PLAIN}a b\n",
		"control in the name": "al\x01ice:{PLAIN}x\n",
		"malformed md5":       "alice:$apr1$nosalt\n",
		"nothing":             "# only a comment\n\n",
		"unknown scheme":      "alice:{MD4}abc\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(data))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, line := range strings.Split(data, "\n") {
				if _, hash, ok := strings.Cut(line, ":"); ok && len(hash) > 3 && !strings.HasPrefix(line, "#") && strings.Contains(err.Error(), hash) {
					t.Errorf("error shows a hash: %v", err)
				}
			}
		})
	}
	if _, err := ParseMap(map[string][]byte{"alice": []byte("{PLAIN}a"), "bob": []byte("$y$j9T$x$y")}); err == nil {
		t.Error("auth-map with a yescrypt hash accepted")
	}
	c, err := ParseMap(map[string][]byte{"alice": []byte("{PLAIN}pw-alice\n"), "bob": []byte("{SHA}G5zynyVKZeHPqXetqic75L7ZkrM=")})
	if err != nil || !c.Verify("alice", "pw-alice") || !c.Verify("bob", "pw-sha") {
		t.Errorf("auth-map: %v", err)
	}
}

// nginx, with the same file as auth_basic_user_file, gives the answers
// Verify gives: for each user, the right password, a wrong one, and the
// ignored second entry; yescrypt and DES (refused by Parse) are accepted by
// nginx's crypt(3), which is why Parse refuses them rather than answer
// differently.
func TestSameAnswersAsNginx(t *testing.T) {
	nginx := "/usr/sbin/nginx"
	if _, err := os.Stat(nginx); err != nil {
		t.Fatalf("nginx is not installed (test/setup.sh installs it): %v", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("run as root (CI does): nginx reads the file as root with master_process off")
	}
	dir := t.TempDir()
	usersFile, _ := filepath.Abs("testdata/users.htpasswd")
	unsupported, _ := filepath.Abs("testdata/unsupported.htpasswd")
	port := harness.FreePort(t, "127.0.0.1")
	conf := fmt.Sprintf(`daemon off;
master_process off;
error_log stderr notice;
pid %[1]s/nginx.pid;
events {}
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server {
        listen 127.0.0.1:%[2]d;
        location /users { auth_basic "t"; auth_basic_user_file %[3]s; stub_status; }
        location /unsupported { auth_basic "t"; auth_basic_user_file %[4]s; stub_status; }
    }
}
`, dir, port, usersFile, unsupported)
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(nginx, "-t", "-p", dir, "-c", filepath.Join(dir, "nginx.conf")).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	p := harness.StartProcess(t, harness.Cmd{Name: "nginx", Path: nginx, Args: []string{"-p", dir, "-c", filepath.Join(dir, "nginx.conf")}})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	harness.WaitFor(t, 10*time.Second, "nginx", p, harness.TCPReady("127.0.0.1:"+strconv.Itoa(port)))
	ask := func(path, user, pw string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.SetBasicAuth(user, pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	data, _ := os.ReadFile("testdata/users.htpasswd")
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range append(append([]string(nil), users...), "nobody") {
		for _, pw := range []string{"pw-" + u, "pw-" + u + "x", "second-line-ignored"} {
			want := ask("/users", u, pw) == 200
			if got := c.Verify(u, pw); got != want {
				t.Errorf("%s/%s: Verify %v, nginx %v", u, pw, got, want)
			}
		}
	}
	for _, u := range []string{"yes", "des"} {
		if code := ask("/unsupported", u, "pw-"+u); code != 200 {
			t.Errorf("nginx refused %s's right password (%d): the note in the package comment is wrong", u, code)
		}
	}
}

// FuzzParse: Parse never panics; what it accepts writes back as a file that
// reads back to the same credentials, holding no control character.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"alice:{PLAIN}a\n", "a:$apr1$x$y\nb:$1$s$h\n", "#c\n\nu:{SHA}G5zynyVKZeHPqXetqic75L7ZkrM=\r\n",
		"u:$6$rounds=5000$s$h\n", "u:$2y$05$abcdefghijklmnopqrstuu05PhAplxWqDxnJScpSYqKmGxTbks2mG", ":x", "a:b:c"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		if strings.ContainsFunc(string(c.File()), func(r rune) bool { return r != '\n' && isControl(r) }) {
			t.Fatalf("file %q holds a control character", c.File())
		}
		again, err := Parse(c.File())
		if err != nil || again.Digest() != c.Digest() || again.Users() != c.Users() {
			t.Fatalf("file %q does not read back: %v", c.File(), err)
		}
	})
}
