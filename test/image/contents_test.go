package image

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// What the image runs as and how; deploy/Dockerfile, deploy/base's
// DaemonSet (runAsUser 10001) and build.sh all say the same.
const (
	imageUser       = "10001:10001"
	imageUID        = 10001
	imageBinary     = "usr/local/bin/switchyard"
	imageNginx      = "usr/sbin/nginx"
	imageLuaDir     = "usr/share/switchyard/lua"
	imageHome       = "var/lib/switchyard"
	capNetBindBit   = 10         // CAP_NET_BIND_SERVICE, linux/capability.h
	vfsCapRevMask   = 0xFF000000 // VFS_CAP_REVISION_MASK
	vfsCapRevision2 = 0x02000000
	vfsCapRevision3 = 0x03000000
	vfsCapEffective = 0x000001 // VFS_CAP_FLAGS_EFFECTIVE
)

var (
	wantEntrypoint = []string{"/usr/local/bin/switchyard"}
	wantCmd        = []string{"controller"}
	wantPorts      = []string{"10254/tcp", "443/tcp", "80/tcp"}
)

// packageList reads deploy/image/packages.txt, the one list of the image's
// Debian packages.
func packageList(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "deploy/image/packages.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// dockerfile is what the tests compare of deploy/Dockerfile's final stage.
type dockerfile struct {
	packages   []string // the apt-get install line
	user       string
	entrypoint []string
	cmd        []string
	ports      []string
	text       string
}

func readDockerfile(t *testing.T) dockerfile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Continuation lines joined, comments dropped.
	var joined []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		joined = append(joined, line)
	}
	text := strings.ReplaceAll(strings.Join(joined, "\n"), "\\\n", " ")
	d := dockerfile{text: text}
	install := regexp.MustCompile(`apt-get install -y --no-install-recommends ([^&]+)&&`).FindAllStringSubmatch(text, -1)
	if len(install) != 1 {
		t.Fatalf("deploy/Dockerfile: %d apt-get install lines; want 1", len(install))
	}
	d.packages = strings.Fields(install[0][1])
	sort.Strings(d.packages)
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "USER":
			d.user = f[1]
		case "EXPOSE":
			for _, p := range f[1:] {
				d.ports = append(d.ports, p+"/tcp")
			}
			sort.Strings(d.ports)
		case "ENTRYPOINT", "CMD":
			var v []string
			if err := json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, f[0]))), &v); err != nil {
				t.Fatalf("deploy/Dockerfile: %s is not in exec form: %v", f[0], err)
			}
			if f[0] == "CMD" {
				d.cmd = v
			} else {
				d.entrypoint = v
			}
		}
	}
	return d
}

// TestDockerfileInSync: deploy/Dockerfile installs deploy/image/packages.txt
// (plus libcap2-bin, purged after setcap), and has the user, paths, ports,
// entrypoint and cmd that build.sh gives the image.
func TestDockerfileInSync(t *testing.T) {
	d := readDockerfile(t)
	want := append(packageList(t), "libcap2-bin")
	sort.Strings(want)
	if diff := cmp.Diff(want, d.packages); diff != "" {
		t.Errorf("deploy/Dockerfile's apt-get install line differs from deploy/image/packages.txt + libcap2-bin (-want +got):\n%s", diff)
	}
	if d.user != imageUser {
		t.Errorf("deploy/Dockerfile USER %q; want %q", d.user, imageUser)
	}
	if diff := cmp.Diff(wantEntrypoint, d.entrypoint); diff != "" {
		t.Errorf("deploy/Dockerfile ENTRYPOINT (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCmd, d.cmd); diff != "" {
		t.Errorf("deploy/Dockerfile CMD (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantPorts, d.ports); diff != "" {
		t.Errorf("deploy/Dockerfile EXPOSE (-want +got):\n%s", diff)
	}
	for _, s := range []string{
		"apt-get purge -y --auto-remove libcap2-bin",
		"--uid 10001 --gid 10001", "--gid 10001 switchyard", "--home-dir /var/lib/switchyard",
		"install -d -m 0755 -o 10001 -g 10001 /var/lib/switchyard /var/lib/switchyard/nginx",
		"/" + imageBinary, "/" + imageLuaDir + "/", "/" + imageLuaDir + "/switchyard/",
		"setcap cap_net_bind_service=+ep /" + imageBinary, "setcap cap_net_bind_service=+ep /" + imageNginx,
		"CGO_ENABLED=0 go build -trimpath",
		"find / -xdev -type f -perm /6000 -exec chmod ug-s {} +",
	} {
		if !strings.Contains(d.text, s) {
			t.Errorf("deploy/Dockerfile lacks %q (build.sh does it)", s)
		}
	}
}

// TestImageConfig: the image runs `/usr/local/bin/switchyard controller` as
// 10001:10001, as deploy/Dockerfile says, and umoci's runtime bundle (what
// a runtime derives from the image) says the same.
func TestImageConfig(t *testing.T) {
	img := image(t)
	c := img.config
	if c.OS != "linux" || c.Architecture != "amd64" {
		t.Errorf("image for %s/%s; want linux/amd64", c.OS, c.Architecture)
	}
	if c.Config.User != imageUser {
		t.Errorf("User %q; want %q", c.Config.User, imageUser)
	}
	if diff := cmp.Diff(wantEntrypoint, c.Config.Entrypoint); diff != "" {
		t.Errorf("Entrypoint (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantCmd, c.Config.Cmd); diff != "" {
		t.Errorf("Cmd (-want +got):\n%s", diff)
	}
	var ports []string
	for p := range c.Config.ExposedPorts {
		ports = append(ports, p)
	}
	sort.Strings(ports)
	if diff := cmp.Diff(wantPorts, ports); diff != "" {
		t.Errorf("ExposedPorts (-want +got):\n%s", diff)
	}
	if !slices.ContainsFunc(c.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		t.Errorf("Env %q has no PATH", c.Config.Env)
	}
	if got := c.Config.Labels["org.opencontainers.image.version"]; got != img.tag {
		t.Errorf("label org.opencontainers.image.version %q; want the tag %q", got, img.tag)
	}

	var bundle struct {
		Process struct {
			User struct {
				UID uint32 `json:"uid"`
				GID uint32 `json:"gid"`
			} `json:"user"`
			Args []string `json:"args"`
		} `json:"process"`
	}
	if err := readJSON(filepath.Join(unpacked(t, img), "config.json"), &bundle); err != nil {
		t.Fatal(err)
	}
	if bundle.Process.User.UID != imageUID || bundle.Process.User.GID != imageUID {
		t.Errorf("runtime bundle user %d:%d; want %s", bundle.Process.User.UID, bundle.Process.User.GID, imageUser)
	}
	if diff := cmp.Diff(append(slices.Clone(wantEntrypoint), wantCmd...), bundle.Process.Args); diff != "" {
		t.Errorf("runtime bundle args (-want +got):\n%s", diff)
	}
}

// vfsCap decodes a security.capability value (struct vfs_cap_data,
// linux/capability.h): revision 2 or 3, the effective flag, and the
// permitted and inheritable sets.
func vfsCap(b []byte) (rev uint32, effective bool, permitted, inheritable uint64, ok bool) {
	if len(b) != 20 && len(b) != 24 {
		return 0, false, 0, 0, false
	}
	le := binary.LittleEndian
	magic := le.Uint32(b[0:4])
	rev = magic & vfsCapRevMask
	if (rev == vfsCapRevision2) != (len(b) == 20) || (rev == vfsCapRevision3) != (len(b) == 24) {
		return rev, false, 0, 0, false
	}
	permitted = uint64(le.Uint32(b[4:8])) | uint64(le.Uint32(b[12:16]))<<32
	inheritable = uint64(le.Uint32(b[8:12])) | uint64(le.Uint32(b[16:20]))<<32
	return rev, magic&vfsCapEffective != 0, permitted, inheritable, true
}

// checkNetBindCap fails unless b is exactly cap_net_bind_service=ep.
func checkNetBindCap(t *testing.T, what string, b []byte) {
	t.Helper()
	rev, eff, perm, inh, ok := vfsCap(b)
	if !ok || !eff || perm != 1<<capNetBindBit || inh != 0 {
		t.Errorf("%s: security.capability %x (revision %#x, effective %v, permitted %#x, inheritable %#x); want cap_net_bind_service=ep only",
			what, b, rev, eff, perm, inh)
	}
}

// compilerNames are files no runtime image of ours should hold: the Go
// toolchain and C/C++ compilers, assemblers and linkers.
var compilerNames = regexp.MustCompile(`^(go|gofmt|gcc(-[0-9.]+)?|cc|c\+\+|g\+\+(-[0-9.]+)?|cpp(-[0-9.]+)?|clang(\+\+)?(-[0-9.]+)?|tcc|as|ld|ld\.(bfd|gold|lld)|x86_64-linux-gnu-(gcc|g\+\+|cpp|as|ld)(-[0-9.]+)?|rustc|cc1|cc1plus)$`)

// compilerPackages are Debian packages that would bring them.
// (gcc-12-base, which libgcc-s1 needs, holds no compiler.)
var compilerPackages = regexp.MustCompile(`^(golang(-[0-9.]+)?(-go|-src)?|gccgo(-[0-9]+)?|gcc(-[0-9]+)?|g\+\+(-[0-9]+)?|cpp(-[0-9]+)?|clang(-[0-9]+)?|binutils(-.+)?|libc6-dev|build-essential|tcc|rustc)$`)

// TestImageContents reads the layer: the user and group 10001 and their
// home, the binary (static, 10001 may run it, cap_net_bind_service=ep) and
// nginx with the same capability and nothing else with one, no setuid or
// setgid file, the Lua shim as
// in lua/, the Debian packages of packages.txt installed, no Go toolchain
// and no compiler. It logs the image's sizes.
func TestImageContents(t *testing.T) {
	img := image(t)
	files := layerFiles(t, img)

	var compressed int64 = img.manifestSize + img.manifest.Config.Size
	for _, l := range img.manifest.Layers {
		compressed += l.Size
	}
	var unpackedSize int64
	for _, e := range files {
		unpackedSize += e.size
	}
	archive, err := os.Stat(img.archive)
	if err != nil {
		t.Fatalf("oci-archive: %v", err)
	}
	t.Logf("image %s: %.1f MB compressed (manifest, config and layer blobs; the oci-archive is %.1f MB), %.1f MB unpacked (%d entries); the binary %.1f MB",
		img.tag, mb(compressed), mb(archive.Size()), mb(unpackedSize), len(files), mb(files[imageBinary].size))

	// Caps: exactly the binary and nginx.
	var withCaps []string
	for name, e := range files {
		if e.caps != nil {
			withCaps = append(withCaps, name)
			checkNetBindCap(t, "layer "+name, e.caps)
		}
	}
	sort.Strings(withCaps)
	if diff := cmp.Diff([]string{imageBinary, imageNginx}, withCaps); diff != "" {
		t.Errorf("files with a security.capability record in the layer (-want +got):\n%s", diff)
	}
	for _, name := range []string{imageBinary, imageNginx} {
		if e := files[name]; e.typ != '0' || e.mode&0o111 != 0o111 {
			t.Errorf("%s: type %q mode %o; want a regular file executable by all", name, e.typ, e.mode)
		}
	}
	// No setuid or setgid file: the DaemonSet allows privilege escalation
	// (for the file capabilities), so nothing else may raise privileges.
	for name, e := range files {
		if e.typ == '0' && e.mode&0o6000 != 0 {
			t.Errorf("/%s is setuid or setgid (mode %o)", name, e.mode)
		}
	}

	// The user and its home.
	root := filepath.Join(unpacked(t, img), "rootfs")
	for file, want := range map[string]string{
		"etc/passwd": "switchyard:x:10001:10001:Switchyard:/var/lib/switchyard:/usr/sbin/nologin",
		"etc/group":  "switchyard:x:10001:",
	} {
		data, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, ":10001:") {
				got = append(got, line)
			}
		}
		if diff := cmp.Diff([]string{want}, got); diff != "" {
			t.Errorf("%s lines naming 10001 (-want +got):\n%s", file, diff)
		}
	}
	for _, dir := range []string{imageHome, imageHome + "/nginx"} {
		if e, ok := files[dir]; !ok || e.typ != '5' || e.uid != imageUID || e.gid != imageUID || e.mode&0o777 != 0o755 {
			t.Errorf("%s: %+v; want a directory 0755 owned by 10001:10001", dir, e)
		}
	}

	// The binary is static (no ELF interpreter), as CGO_ENABLED=0 builds it.
	bin, err := elf.Open(filepath.Join(root, imageBinary))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range bin.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not a static binary", imageBinary)
		}
	}
	_ = bin.Close()

	// The Lua shim: every .lua file of lua/, with the same content.
	luaFiles, err := filepath.Glob(filepath.Join(repoRoot, "lua", "*.lua"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join(repoRoot, "lua", "switchyard", "*.lua"))
	if err != nil {
		t.Fatal(err)
	}
	luaFiles = append(luaFiles, more...)
	if len(luaFiles) < 3 {
		t.Fatalf("lua/: only %d .lua files found", len(luaFiles))
	}
	var wantLua, gotLua []string
	for _, src := range luaFiles {
		rel, _ := filepath.Rel(filepath.Join(repoRoot, "lua"), src)
		wantLua = append(wantLua, imageLuaDir+"/"+rel)
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, imageLuaDir, rel))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s in the image differs from lua/%s (err %v)", imageLuaDir+"/"+rel, rel, err)
		}
	}
	for name, e := range files {
		if strings.HasPrefix(name, imageLuaDir+"/") && e.typ == '0' {
			gotLua = append(gotLua, name)
		}
	}
	sort.Strings(wantLua)
	sort.Strings(gotLua)
	if diff := cmp.Diff(wantLua, gotLua); diff != "" {
		t.Errorf("files under /%s (-want +got):\n%s", imageLuaDir, diff)
	}
	// What the rendered nginx.conf loads (nginxcompat/templates/nginx.tmpl)
	// and the shim requires (ngx.balancer, resty.core, cjson).
	for _, name := range []string{
		"usr/lib/nginx/modules/ndk_http_module.so", "usr/lib/nginx/modules/ngx_http_lua_module.so",
		"usr/share/lua/5.1/ngx/balancer.lua", "usr/share/lua/5.1/resty/core.lua",
		"etc/ssl/certs/ca-certificates.crt",
	} {
		if _, ok := files[name]; !ok {
			t.Errorf("the image lacks /%s", name)
		}
	}

	// Debian packages: those of packages.txt installed; none that compiles.
	status, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	var pkg string
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Package: "); ok {
			pkg = v
		}
		if line == "Status: install ok installed" {
			installed[pkg] = true
		}
	}
	for _, p := range packageList(t) {
		if !installed[p] {
			t.Errorf("Debian package %s (deploy/image/packages.txt) is not installed in the image", p)
		}
	}
	for p := range installed {
		if compilerPackages.MatchString(p) {
			t.Errorf("the image has the Debian package %s (a compiler or toolchain)", p)
		}
	}
	t.Logf("%d Debian packages installed", len(installed))
	for name := range files {
		if compilerNames.MatchString(filepath.Base(name)) && (strings.Contains(name, "bin/") || strings.Contains(name, "libexec/")) {
			t.Errorf("the image has /%s (a compiler, assembler, linker or Go tool)", name)
		}
		if strings.HasPrefix(name, "usr/local/go/") || strings.HasPrefix(name, "usr/lib/go") || strings.HasPrefix(name, "usr/lib/gcc/") {
			t.Errorf("the image has /%s (a Go or GCC tree)", name)
		}
	}
}

func mb(n int64) float64 { return float64(n) / 1e6 }

// TestImageBinaryRuntime: the image's binary is built with the release
// build's runtime overlay (deploy/goruntime/overlay.sh), whose changes its
// version line names.
func TestImageBinaryRuntime(t *testing.T) {
	img := image(t)
	bin := filepath.Join(unpacked(t, img), "rootfs", imageBinary)
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", imageBinary, err)
	}
	if v := strings.TrimSpace(string(out)); !strings.HasSuffix(v, " +netpoll-fifo+idle-spin") {
		t.Errorf("the image's switchyard version is %q; want it built with both changes of deploy/goruntime/overlay.sh's overlay (+netpoll-fifo+idle-spin)", v)
	}
}
