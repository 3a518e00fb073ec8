// Package image checks the controller image that deploy/image/build.sh
// (`make image`) builds, without a container engine (docs/image.md).
//
// The tests build the image once per test binary into a temporary directory
// (or take the one in $SWITCHYARD_IMAGE_DIR, an output directory of
// build.sh), then read the OCI layout with the standard library: digests,
// the image config (user 10001, entrypoint, cmd, in step with
// deploy/Dockerfile), the layer's files (the user, the Lua shim, the
// security.capability records, no Go toolchain and no compiler) and the
// sizes. They unpack it with umoci as a runtime would and run its entrypoint
// inside the root filesystem as uid 10001 with only NET_BIND_SERVICE in the
// bounding set (setpriv, then chroot; /proc and a minimal /dev mounted as a
// runtime does), on ports 80 and 443, in manifests mode, once per data plane,
// and send requests through it to a backend on loopback.
//
// Everything runs inside test/harness's private network and PID namespaces,
// so ports 80, 443 and 10254 collide with nothing and every process dies with
// the binary. Needs root, mmdebstrap, umoci, setcap and Go (test/setup.sh
// installs the tools); without them the tests fail under CI=true and skip
// loudly elsewhere.
//
// Flows in: deploy/image, deploy/Dockerfile, lua/. Flows out: nothing.
// Imports only the standard library and test/harness; nothing may import it.
package image
